"""``keras.applications``: ResNet50, MobileNetV2, VGG16, EfficientNetB0, DenseNet121 with Keras'
architectures, layer names and parameter counts. No pretrained weights are shipped or downloaded:
build with ``weights=None`` (or the path of a weights file saved earlier)."""
from tensorweave.keras.applications.densenet import DenseNet121  # noqa: F401
from tensorweave.keras.applications.efficientnet import EfficientNetB0  # noqa: F401
from tensorweave.keras.applications.mobilenet_v2 import MobileNetV2  # noqa: F401
from tensorweave.keras.applications.resnet import ResNet50  # noqa: F401
from tensorweave.keras.applications.vgg16 import VGG16  # noqa: F401
