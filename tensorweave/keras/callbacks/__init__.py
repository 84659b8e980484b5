"""Training callbacks (``keras.callbacks``)."""
from tensorweave.keras.callbacks.callback import Callback, CallbackList  # noqa: F401
from tensorweave.keras.callbacks.history import History  # noqa: F401
from tensorweave.keras.callbacks.progbar_logger import ProgbarLogger  # noqa: F401
