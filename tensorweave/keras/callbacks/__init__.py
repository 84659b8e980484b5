"""Training callbacks (``keras.callbacks``)."""
from tensorweave.keras.callbacks.callback import Callback, CallbackList  # noqa: F401
from tensorweave.keras.callbacks.history import History  # noqa: F401
from tensorweave.keras.callbacks.progbar_logger import ProgbarLogger  # noqa: F401
from tensorweave.keras.callbacks.backup_and_restore import BackupAndRestore  # noqa: F401
from tensorweave.keras.callbacks.csv_logger import CSVLogger  # noqa: F401
from tensorweave.keras.callbacks.early_stopping import EarlyStopping  # noqa: F401
from tensorweave.keras.callbacks.lambda_callback import LambdaCallback  # noqa: F401
from tensorweave.keras.callbacks.learning_rate_scheduler import LearningRateScheduler  # noqa: F401
from tensorweave.keras.callbacks.model_checkpoint import ModelCheckpoint  # noqa: F401
from tensorweave.keras.callbacks.monitor_callback import MonitorCallback  # noqa: F401
from tensorweave.keras.callbacks.reduce_lr_on_plateau import ReduceLROnPlateau  # noqa: F401
from tensorweave.keras.callbacks.tensorboard import TensorBoard  # noqa: F401
from tensorweave.keras.callbacks.terminate_on_nan import TerminateOnNaN  # noqa: F401
