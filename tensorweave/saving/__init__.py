"""Saving and loading: tensor files, checkpoints, SavedModel, export. Nothing here unpickles."""
