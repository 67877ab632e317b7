"""find_unpicklable names the deepest part of an object that does not pickle."""

import pickle
import threading

from sinkv2._pickling import find_unpicklable


class Client:
    def __init__(self) -> None:
        self.url = "http://localhost"
        self._lock = threading.Lock()


class Sink:
    def __init__(self) -> None:
        self.name = "orders"
        self.options = {"retries": 3, "clients": [Client()]}


class Slotted:
    __slots__ = ("fine", "handle")

    def __init__(self) -> None:
        self.fine = 1
        self.handle = threading.Lock()


class Refuses:
    def __reduce__(self):
        raise TypeError("I never travel")


def test_a_picklable_object_has_no_culprit():
    assert find_unpicklable({"a": [1, 2, (3,)]}, pickle.dumps) is None


def test_the_path_goes_through_attributes_dicts_and_lists():
    path, culprit = find_unpicklable(Sink(), pickle.dumps)
    assert path == "sink.options['clients'][0]._lock"
    assert type(culprit).__name__ == "lock"


def test_slots_are_walked_too():
    path, _ = find_unpicklable(Slotted(), pickle.dumps, name="writer")
    assert path == "writer.handle"


def test_an_object_that_refuses_itself_is_the_culprit():
    holder = Sink()
    holder.options = {}
    holder.extra = Refuses()
    path, culprit = find_unpicklable(holder, pickle.dumps)
    assert path == "sink.extra"
    assert isinstance(culprit, Refuses)
