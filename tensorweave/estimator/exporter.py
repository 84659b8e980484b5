"""Exporters of ``EvalSpec(exporters=...)``: after an evaluation, write a SavedModel.

``FinalExporter`` exports once training is done, ``LatestExporter`` after every evaluation
(keeping ``exports_to_keep`` of them), ``BestExporter`` when the evaluation improves on the best
so far (by ``compare_fn``, default: lower ``loss``).
"""
import os
import shutil

__all__ = ["Exporter", "FinalExporter", "LatestExporter", "BestExporter"]


class Exporter:
    name = None

    def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
        raise NotImplementedError


def _loss_smaller(best_eval_result, current_eval_result):
    return current_eval_result["loss"] < best_eval_result["loss"]


class _Saving(Exporter):
    def __init__(self, name, serving_input_receiver_fn):
        if not name:
            raise ValueError("an exporter needs a name")
        self.name = name
        self._receiver_fn = serving_input_receiver_fn

    def _write(self, estimator, export_path, checkpoint_path):
        return estimator.export_saved_model(export_path, self._receiver_fn, checkpoint_path=checkpoint_path)


class FinalExporter(_Saving):
    """Exports once, after the final evaluation."""

    def __init__(self, name, serving_input_receiver_fn, assets_extra=None, as_text=False):
        super().__init__(name, serving_input_receiver_fn)

    def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
        return self._write(estimator, export_path, checkpoint_path) if is_the_final_export else None


class LatestExporter(_Saving):
    """Exports after every evaluation, keeping the newest ``exports_to_keep`` exports."""

    def __init__(self, name, serving_input_receiver_fn, assets_extra=None, as_text=False, exports_to_keep=5):
        super().__init__(name, serving_input_receiver_fn)
        if exports_to_keep is not None and exports_to_keep <= 0:
            raise ValueError(f"LatestExporter: exports_to_keep must be positive or None, got {exports_to_keep}")
        self._keep = exports_to_keep

    def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
        path = self._write(estimator, export_path, checkpoint_path)
        if self._keep:
            exports = sorted((d for d in os.listdir(export_path) if d.isdigit()), key=int)
            for old in exports[:-self._keep]:
                shutil.rmtree(os.path.join(export_path, old), ignore_errors=True)
        return path


class BestExporter(_Saving):
    """Exports when ``compare_fn(best_eval_result, current_eval_result)`` says the evaluation improved."""

    def __init__(self, name="best_exporter", serving_input_receiver_fn=None, event_file_pattern="eval/*.tfevents.*",
                 compare_fn=_loss_smaller, assets_extra=None, as_text=False, exports_to_keep=5):
        super().__init__(name, serving_input_receiver_fn)
        self._compare = compare_fn
        self._best = None

    def export(self, estimator, export_path, checkpoint_path, eval_result, is_the_final_export):
        if self._best is None or self._compare(self._best, eval_result):
            self._best = dict(eval_result)
            return self._write(estimator, export_path, checkpoint_path)
        return None
