import time

from sinkv2.runtime import CooperativeProcessingTimeService


class Clock:
    def __init__(self):
        self.now = 1_000

    def __call__(self):
        return self.now


def test_timers_fire_in_time_order_only_when_due_and_only_when_asked():
    clock = Clock()
    service = CooperativeProcessingTimeService(clock)
    fired = []
    service.register_timer(1_200, fired.append)
    service.register_timer(1_100, fired.append)
    service.register_timer(5_000, fired.append)
    assert service.fire_due_timers() == 0
    clock.now = 1_250
    assert fired == []  # nothing fires behind the writer's back
    assert service.fire_due_timers() == 2
    assert fired == [1_100, 1_200]
    assert service.next_timer_timestamp() == 5_000


def test_cancelled_timer_never_fires():
    clock = Clock()
    service = CooperativeProcessingTimeService(clock)
    fired = []
    timer = service.register_timer(1_000, fired.append)
    assert timer.cancel() is True
    assert timer.cancel() is False
    assert service.fire_due_timers() == 0
    assert service.next_timer_timestamp() is None
    assert fired == []


def test_timer_registered_by_a_callback_for_a_past_time_fires_in_the_same_call():
    clock = Clock()
    service = CooperativeProcessingTimeService(clock)
    fired = []

    def reschedule(timestamp):
        fired.append(timestamp)
        if len(fired) == 1:
            service.register_timer(timestamp, fired.append)

    service.register_timer(900, reschedule)
    assert service.fire_due_timers() == 2
    assert fired == [900, 900]


def test_default_clock_is_wall_time_in_milliseconds():
    now = CooperativeProcessingTimeService().get_current_processing_time()
    assert abs(now - time.time() * 1000) < 5_000
