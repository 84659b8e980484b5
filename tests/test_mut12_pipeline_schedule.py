"""Pipeline schedules as data (distribute/pipeline_schedule.py): the printed grid and the peak
activations of small schedules, exactly (mutation testing, issue 12: ``format_schedule`` was
checked only by a doctest, the one-stage and one-micro-batch edges not at all)."""
import pytest

from tensorweave.distribute.pipeline_schedule import format_schedule, make_schedule, peak_activations


def test_format_schedule_prints_one_row_per_stage_and_one_column_per_slot():
    assert format_schedule(make_schedule(3, 2, "1f1b")).splitlines() == [
        "stage 0: F0 F1 .. .. .. B0 .. B1",
        "stage 1: .. F0 F1 .. B0 .. B1 ..",
        "stage 2: .. .. F0 B0 F1 B1 .. ..",
    ]


def test_format_schedule_pads_to_the_widest_action():
    rows = format_schedule(make_schedule(1, 11, "gpipe")).splitlines()
    assert rows == ["stage 0: " + " ".join([f"F{i}".rjust(3) for i in range(11)] + [f"B{i}".rjust(3) for i in range(11)])]


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_one_micro_batch_holds_one_activation_per_stage(schedule):
    sched = make_schedule(3, 1, schedule)
    assert peak_activations(sched) == [1, 1, 1]
    assert format_schedule(sched).splitlines()[0] == "stage 0: F0 .. .. .. .. B0"
