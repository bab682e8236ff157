"""Mirrors sglang/srt/managers/scheduler_components/request_receiver.py (main)."""

from oracle import ph


class SchedulerRequestReceiver(object):
    def recv_requests(self):
        with ph("sched.recv"):
            return []
