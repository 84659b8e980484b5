"""``tf.compat.v1.graph_util``: freezing and pruning graphs (see ``v1_graph_def.py``)."""
from tensorweave.compat.v1_graph_def import (convert_variables_to_constants, extract_sub_graph,  # noqa: F401
                                             import_graph_def, must_run_on_cpu, remove_training_nodes,
                                             tensor_shape_from_node_def_name)
