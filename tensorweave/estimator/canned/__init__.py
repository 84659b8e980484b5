"""The canned estimators: DNN, linear and wide-and-deep classifiers and regressors."""
