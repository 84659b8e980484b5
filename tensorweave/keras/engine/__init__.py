"""The Keras engine: Layer, symbolic KerasTensors and nodes, functional and Sequential models,
and the training loop."""
