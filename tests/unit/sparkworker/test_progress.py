"""Progress of a job group read from Spark's status tracker, and the board of jobs."""

from __future__ import annotations

import threading

from pyspark.sql import SparkSession

from zbus.sparkworker.progress import (
    PREVIEW_CHARS,
    JobBoard,
    Progress,
    ProgressPoller,
    read_progress,
    settle,
)


def test_a_job_groups_tasks_are_counted(spark: SparkSession) -> None:
    sc = spark.sparkContext
    tracker = sc.statusTracker()
    assert read_progress(tracker, "no-such-group") == Progress()

    def work() -> None:  # the group is a property of the thread that runs the query
        sc.setJobGroup("group-1", "test", interruptOnCancel=True)
        spark.range(0, 1000, numPartitions=4).selectExpr("sum(id)").collect()

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert settle(sc)
    progress = read_progress(tracker, "group-1")
    assert progress.spark_jobs >= 1 and progress.spark_jobs_running == 0
    assert progress.tasks >= 4
    assert progress.tasks_completed >= 4 and progress.tasks_active == 0
    assert progress.view()["tasks"]["total"] == progress.tasks
    assert read_progress(tracker, "group-2") == Progress()


def test_board_keeps_running_and_recent_jobs(spark: SparkSession) -> None:
    board = JobBoard(history=2)
    for n in range(3):
        board.begin(f"j{n}", "topic-stats")
    assert board.running_count == 3
    changed = board.update("j0", Progress(spark_jobs=1, tasks=4, tasks_completed=2))
    assert changed is not None and changed["progress"]["fraction"] == 0.5
    assert board.update("j0", Progress(spark_jobs=1, tasks=4, tasks_completed=2)) is None
    board.finish("j0", "succeeded", output="out/j0")
    board.finish("j1", "failed", error="ValueError: since: bad")
    board.finish("j2", "succeeded")
    view = board.view()
    assert view["running"] == []
    assert [j["job_id"] for j in view["finished"]] == ["j2", "j1"]  # newest first, 2 kept
    failed = board.get("j1")
    assert failed is not None
    assert failed["state"] == "failed" and failed["error"] == "ValueError: since: bad"
    assert board.get("j0") is None


def test_poller_reports_changes(spark: SparkSession) -> None:
    board = JobBoard()
    seen: list[dict[str, object]] = []
    poller = ProgressPoller(
        board, spark.sparkContext.statusTracker, lambda: True, seen.append, interval=60
    )
    sc = spark.sparkContext

    def work() -> None:
        sc.setJobGroup("poll-1", "test")
        spark.range(10).collect()

    board.begin("poll-1", "x")
    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    # The status tracker learns of the job from Spark's listener bus, in another thread:
    # read it once the bus has delivered what the finished query posted.
    assert settle(sc)
    poller.poll()  # one round, in this thread
    assert seen and seen[-1]["job_id"] == "poll-1"
    progress = seen[-1]["progress"]
    assert isinstance(progress, dict) and progress["spark_jobs"] >= 1
    poller.poll()
    assert len(seen) == 1  # nothing changed since


def test_a_finished_jobs_result_is_kept_as_a_bounded_preview() -> None:
    board = JobBoard()
    board.begin("j1", "small")
    board.begin("j2", "large")
    small = board.finish("j1", "succeeded", output="/out/j1", result={"rows": 3})
    assert small is not None and small["result_preview"] == '{"rows":3}'
    large = board.finish("j2", "succeeded", result={"preview": ["x" * 100] * 100})
    assert large is not None
    assert len(large["result_preview"]) == PREVIEW_CHARS
    assert large["result_preview"].endswith("\u2026")
    assert [j["result_preview"] is not None for j in board.view()["finished"]] == [True, True]
