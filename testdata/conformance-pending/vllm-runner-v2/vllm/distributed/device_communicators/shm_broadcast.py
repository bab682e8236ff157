"""vllm/distributed/device_communicators/shm_broadcast.py: MessageQueue, the shared-memory ring
the engine core broadcasts RPCs through and the workers answer on. Here the engine core's side
is a prepared list of RPCs; when it is used up the worker is shut down, as the engine's
shutdown does (SystemExit in the worker's busy loop)."""

import collections


class MessageQueue(object):
    def __init__(self, items=()):
        self._items = collections.deque(items)
        self.responses = []

    def dequeue(self, timeout=None, cancel=None, indefinite=False):
        if not self._items:
            raise SystemExit(0)
        return self._items.popleft()

    def enqueue(self, obj):
        self.responses.append(obj)
