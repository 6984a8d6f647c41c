"""PULSE: a probe on the trajectory of a reasoning step's hidden state through the layers, which flags
steps likely to be wrong so that retrieval is spent where it helps (features, extraction, the probe,
detection metrics and the training-free baselines it is compared with)."""
