"""``tf.estimator``: the Estimator, its specs and run configuration, input functions, canned models."""
from tensorweave.estimator import export, inputs  # noqa: F401
from tensorweave.estimator.estimator import Estimator, add_metrics  # noqa: F401
from tensorweave.estimator.hooks import (CheckpointSaverListener, FeedFnHook, FinalOpsHook,  # noqa: F401
                                         LoggingTensorHook, NanLossDuringTrainingError, NanTensorHook,
                                         SecondOrStepTimer, SessionRunArgs, SessionRunContext, SessionRunHook,
                                         SessionRunValues, StepCounterHook, StopAtStepHook, ProfilerHook)
from tensorweave.estimator.model_fn import EstimatorSpec, EvalSpec, ModeKeys, TrainSpec  # noqa: F401
from tensorweave.estimator.run_config import RunConfig  # noqa: F401
from tensorweave.estimator.training import train_and_evaluate  # noqa: F401
from tensorweave.estimator.canned.dnn import DNNClassifier, DNNEstimator, DNNRegressor  # noqa: F401,E402
from tensorweave.estimator.canned.dnn_linear_combined import (DNNLinearCombinedClassifier,  # noqa: F401,E402
                                                              DNNLinearCombinedEstimator, DNNLinearCombinedRegressor)
from tensorweave.estimator.canned.linear import LinearClassifier, LinearEstimator, LinearRegressor  # noqa: F401,E402
from tensorweave.estimator.canned.baseline import (BaselineClassifier, BaselineEstimator,  # noqa: F401,E402
                                                   BaselineRegressor)
from tensorweave.estimator.canned.head import (BinaryClassHead, Head, LogisticRegressionHead,  # noqa: F401,E402
                                               MultiClassHead, PoissonRegressionHead, RegressionHead)
from tensorweave.estimator.exporter import BestExporter, Exporter, FinalExporter, LatestExporter  # noqa: F401,E402
from tensorweave.estimator.warm_starting import WarmStartSettings  # noqa: F401,E402
from tensorweave.estimator.parsing_utils import (classifier_parse_example_spec,  # noqa: F401,E402
                                                 regressor_parse_example_spec)


def __getattr__(name):
    # TF's tf.estimator also names the monitored session's saving hooks (defined with them, in compat.v1).
    if name in ("CheckpointSaverHook", "SummarySaverHook"):
        from tensorweave.compat import v1_monitored
        return getattr(v1_monitored, name)
    raise AttributeError(f"module 'tensorweave.estimator' has no attribute '{name}'")
