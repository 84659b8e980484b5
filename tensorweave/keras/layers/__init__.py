"""``keras.layers``: the layer catalogue, and (de)serialization of layers by class name."""
from tensorweave.keras.engine.input_layer import Input, InputLayer  # noqa: F401
from tensorweave.keras.engine.layer import InputSpec, Layer  # noqa: F401
from tensorweave.keras.layers.activation import ELU, LeakyReLU, PReLU, ReLU, Softmax  # noqa: F401
from tensorweave.keras.layers.additive_attention import AdditiveAttention  # noqa: F401
from tensorweave.keras.layers.attention import Attention, MultiHeadAttention  # noqa: F401
from tensorweave.keras.layers.color_augmentation import (RandomColorDegeneration, RandomHue,  # noqa: F401
                                                          RandomInvert, RandomPosterization, RandomSaturation,
                                                          RandomSharpness, Solarization)
from tensorweave.keras.layers.conv import (Conv1D, Conv1DTranspose, Conv2D, Conv2DTranspose, Conv3D,  # noqa: F401
                                           Conv3DTranspose, Convolution1D, Convolution2D, Convolution2DTranspose,
                                           Convolution3D, DepthwiseConv2D, SeparableConv2D, SeparableConvolution2D)
from tensorweave.keras.layers.conv1d_more import DepthwiseConv1D, SeparableConv1D  # noqa: F401
from tensorweave.keras.layers.conv_lstm import ConvLSTM1D, ConvLSTM2D, ConvLSTM3D  # noqa: F401
from tensorweave.keras.layers.core import (Activation, Dense, Dropout, Flatten, Identity, Lambda,  # noqa: F401
                                           Permute, Reshape)
from tensorweave.keras.layers.embedding import Embedding  # noqa: F401
from tensorweave.keras.layers.einsum_dense import EinsumDense  # noqa: F401
from tensorweave.keras.layers.image_preprocessing import (AutoContrast, CenterCrop, RandomBrightness,  # noqa: F401
                                                          RandomContrast, RandomCrop, RandomFlip, RandomGrayscale,
                                                          RandomRotation, RandomShear, RandomTranslation, RandomZoom,
                                                          Resizing)
from tensorweave.keras.layers.group_query_attention import GroupedQueryAttention, GroupQueryAttention  # noqa: F401
from tensorweave.keras.layers.masking import Masking  # noqa: F401
from tensorweave.keras.layers.spectral_normalization import SpectralNormalization  # noqa: F401
from tensorweave.keras.layers.merge import (Add, Average, Concatenate, Dot, Maximum, Minimum, Multiply,  # noqa: F401
                                            Subtract, add, average, concatenate, dot, maximum, minimum, multiply,
                                            subtract)
from tensorweave.keras.layers.normalization import BatchNormalization, LayerNormalization  # noqa: F401
from tensorweave.keras.layers.preprocessing import (CategoryEncoding, Discretization, Normalization,  # noqa: F401
                                                    Rescaling)
from tensorweave.keras.layers.normalization_more import (GroupNormalization, RMSNormalization,  # noqa: F401
                                                         UnitNormalization)
from tensorweave.keras.layers.pooling_adaptive import (AdaptiveAveragePooling1D, AdaptiveAveragePooling2D,  # noqa: F401
                                                       AdaptiveAveragePooling3D, AdaptiveMaxPooling1D,
                                                       AdaptiveMaxPooling2D, AdaptiveMaxPooling3D)
from tensorweave.keras.layers.regularization import (ActivityRegularization, AlphaDropout,  # noqa: F401
                                                     GaussianDropout, GaussianNoise, SpatialDropout1D,
                                                     SpatialDropout2D, SpatialDropout3D)
from tensorweave.keras.layers.reshaping import (Cropping1D, Cropping2D, Cropping3D, RepeatVector,  # noqa: F401
                                                UpSampling1D, UpSampling2D, UpSampling3D, ZeroPadding1D,
                                                ZeroPadding2D, ZeroPadding3D)
from tensorweave.keras.layers.rnn import (GRU, LSTM, RNN, Bidirectional, GRUCell, LSTMCell, SimpleRNN,  # noqa: F401
                                          SimpleRNNCell, StackedRNNCells)
from tensorweave.keras.layers.pooling import (AveragePooling1D, AveragePooling2D, AveragePooling3D,  # noqa: F401
                                              AvgPool1D, AvgPool2D, AvgPool3D, GlobalAveragePooling1D,
                                              GlobalAveragePooling2D, GlobalAveragePooling3D, GlobalAvgPool1D,
                                              GlobalAvgPool2D, GlobalAvgPool3D, GlobalMaxPool1D, GlobalMaxPool2D,
                                              GlobalMaxPool3D, GlobalMaxPooling1D, GlobalMaxPooling2D,
                                              GlobalMaxPooling3D, MaxPool1D, MaxPool2D, MaxPool3D, MaxPooling1D,
                                              MaxPooling2D, MaxPooling3D)
from tensorweave.keras.layers.text_preprocessing import (Hashing, IntegerLookup, StringLookup,  # noqa: F401
                                                         TextVectorization)
from tensorweave.keras.layers.reversible_embedding import ReversibleEmbedding  # noqa: F401
from tensorweave.keras.layers.wrappers import Pipeline, TimeDistributed, Wrapper  # noqa: F401

Convolution1DTranspose, Convolution3DTranspose = Conv1DTranspose, Conv3DTranspose
SeparableConvolution1D = SeparableConv1D

_CUSTOM = {}


def register_layer(cls, name=None):
    """Makes ``cls`` loadable by class name (``get_config``/``from_config``)."""
    _CUSTOM[name or cls.__name__] = cls
    return cls


def _registry():
    from tensorweave.keras.engine.functional import Functional
    from tensorweave.keras.engine.sequential import Sequential
    table = {k: v for k, v in globals().items() if isinstance(v, type) and issubclass(v, Layer)}
    table.update({"Sequential": Sequential, "Functional": Functional, "Model": Functional})
    table.update(_CUSTOM)
    return table


def serialize(layer):
    return {"class_name": type(layer).__name__, "config": layer.get_config()}


def deserialize(config, custom_objects=None):
    table = _registry()
    table.update(custom_objects or {})
    cls = table.get(config["class_name"])
    if cls is None:
        raise ValueError(f"Unknown layer class {config['class_name']!r}. Hint: pass it in custom_objects or "
                         "register it with keras.layers.register_layer")
    if hasattr(cls, "from_config"):
        try:
            return cls.from_config(config["config"], custom_objects=custom_objects)
        except TypeError:
            return cls.from_config(config["config"])
    return cls(**config["config"])
