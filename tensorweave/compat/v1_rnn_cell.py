"""``tf.compat.v1.nn.rnn_cell``: TF1's RNN cells (see ``v1_rnn``)."""
from tensorweave.compat.v1_rnn import (BasicLSTMCell, BasicRNNCell, DeviceWrapper, DropoutWrapper,  # noqa: F401
                                       GRUCell, LSTMCell, LSTMStateTuple, MultiRNNCell, ResidualWrapper, RNNCell)
