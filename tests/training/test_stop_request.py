"""solution.train.StopRequest on its own, in this process: what SIGTERM/SIGINT/SIGUSR1 do before the loop
is armed and after. The launches that send real signals are in tests/distributed/test_preemption.py."""

import signal

import pytest

from solution.training.stop import StoppedBySignal, StopRequest


def test_before_the_loop_is_armed_the_first_signal_stops_at_once_and_a_second_does_not_raise_again():
    """SLURM signals every process of the step and torch's launcher forwards the signal to its workers, so
    a rank gets SIGUSR1 twice. The second arrives while the first one's stop unwinds (writing the `stopped`
    record that decides the requeue): raised again, it would cut that short."""
    with StopRequest() as request:
        with pytest.raises(StoppedBySignal) as stop:
            request._handle(signal.SIGUSR1, None)
        assert stop.value.exit_code == 128 + signal.SIGUSR1
        request._handle(signal.SIGUSR1, None)  # the forwarded copy: nothing raised
        request._handle(signal.SIGTERM, None)
        assert request.signum == signal.SIGUSR1


def test_once_armed_a_signal_only_sets_the_flag_and_the_first_one_is_kept():
    with StopRequest() as request:
        request.armed = True
        request._handle(signal.SIGTERM, None)
        request._handle(signal.SIGUSR1, None)
        assert request.signum == signal.SIGTERM
        assert request.flags() == [1.0, 0.0, 0.0]


def test_the_handlers_are_restored_when_the_request_closes():
    before = {sig: signal.getsignal(sig) for sig in StopRequest.SIGNALS}
    with StopRequest() as request:
        assert all(signal.getsignal(sig) == request._handle for sig in StopRequest.SIGNALS)
    assert {sig: signal.getsignal(sig) for sig in StopRequest.SIGNALS} == before
