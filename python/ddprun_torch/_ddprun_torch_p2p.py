"""The point-to-point part of ddprun's PyTorch progress hook (sitecustomize.py, beside it): Gloo's
flight recorder leaves out send, recv, batch_isend_irecv and monitored_barrier (made of sends and
recvs inside PyTorch), so the hook wraps them in torch.distributed.distributed_c10d as it is
imported, and counts each operation entered and finished (progress too); sitecustomize.py reads
what still waits and the barriers' counts. It changes nothing the program does: the wrapped
functions return what they did and raise what they did."""
import sys
import threading
import time

# Called once a process group is made (init_process_group): sitecustomize.py starts its watcher
# there, in a forked child that has none.
on_init = None
# Called as init_process_group begins, before PyTorch's own (sitecustomize.py: a process group made
# again makes the rank run again at once).
on_init_begin = None
# Called once torch.distributed.distributed_c10d is imported: sitecustomize.py starts its watcher
# then, not before (a program that never imports it has no thread of ddprun's: attack 92).
on_import = None
# Inside send, recv or batch_isend_irecv, which call isend/irecv and record the operation
# themselves (it was recorded twice).
_inner = threading.local()

_p2p = {}  # key -> (op, peer, group name, the Work of an async one or None): ops not finished
_p2p_lock = threading.Lock()
_p2p_changes = 0  # counts ops entered and finished: progress the flight recorder does not see


# Gloo's monitored_barrier is made of sends and recvs inside PyTorch, which its flight recorder
# leaves out: group name -> [calls, "entered", "retired" or "raised" (for good, once one raised),
# wall-clock ns when last entered, id() of the group object]. Counted from the group's making,
# whenever the watcher first looks.
_barriers = {}


def _barrier_enter(group, pg_id):
    global _p2p_changes
    with _p2p_lock:
        _p2p_changes += 1
        b = _barriers.get(group)
        if b is None or b[3] != pg_id:  # a group of that name made again: counted anew
            b = _barriers[group] = [0, "retired", 0, pg_id]
        b[0] += 1
        if b[1] != "raised":
            b[1] = "entered"
        b[2] = time.time_ns()


def forget_dead_barriers(c10d_py):
    """Drops the barriers of process groups that no longer exist (destroyed, made again)."""
    try:
        live = {id(pg) for pg in list(c10d_py._world.pg_names)}
    except Exception:
        return
    with _p2p_lock:
        for name in [n for n, b in _barriers.items() if b[3] not in live]:
            del _barriers[name]


def _barrier_leave(group, passed):
    """A barrier that raised (PyTorch found a rank missing) is "raised" for good: this rank left
    it, the others may never have entered it, and a program that caught the error goes on with
    its count of the group's barriers one apart from theirs; ddprun compares them no more."""
    global _p2p_changes
    with _p2p_lock:
        _p2p_changes += 1
        b = _barriers.get(group)
        if b is None:
            return  # forgotten meanwhile (its group destroyed, a fork): never out of the barrier
        if not passed:
            b[1] = "raised"
        elif b[1] != "raised":
            b[1] = "retired"


def _p2p_enter(op, peer, group, work=None):
    global _p2p_changes
    with _p2p_lock:
        _p2p_changes += 1
        key = _p2p_changes
        _p2p[key] = (op, peer, group, work)
    return key


def _p2p_leave(key):
    global _p2p_changes
    with _p2p_lock:
        if _p2p.pop(key, None) is not None:
            _p2p_changes += 1


def waiting():
    """The point-to-point operations still waiting, (op, peer, group name) each; the finished
    async ones are dropped (each finished one is a change)."""
    global _p2p_changes
    out = []
    with _p2p_lock:
        for key, (op, peer, group, work) in list(_p2p.items()):
            try:
                done = work is not None and work.is_completed()
            except Exception:
                done = True  # a Work that cannot say: not reported as waiting
            if done:
                del _p2p[key]
                _p2p_changes += 1
                continue
            out.append((op, peer, group))
    return out


def changes():
    """How many operations were entered and finished so far."""
    return _p2p_changes


def barriers():
    """Each group's monitored_barrier: [(group name, (calls, state, entered ns, group id))]."""
    with _p2p_lock:
        return [(name, tuple(b)) for name, b in _barriers.items()]


def after_fork_in_child():
    """A lock another thread of the parent held at the fork stays held in the child for good: a
    new one. The parent's operations in flight are not the child's."""
    global _p2p_lock
    _p2p_lock = threading.Lock()
    _p2p.clear()
    _barriers.clear()


def _peer(c10d_py, group, rank, group_rank):
    """The global rank of a p2p operation's peer: "*" for any (recv without a source)."""
    if rank is None and group_rank is None:
        return "*"
    if rank is not None:
        return str(int(rank))
    return str(int(c10d_py.get_global_rank(group, group_rank)))


def _p2p_args(c10d_py, signature, args, kwargs, peer_name):
    """(peer, group name) of one call of send or recv, "?" where it cannot tell."""
    try:
        bound = signature.bind_partial(*args, **kwargs).arguments
        group = bound.get("group")
        if group is None:
            group = c10d_py._get_default_group()
        name = c10d_py._get_process_group_name(group)
        return _peer(c10d_py, group, bound.get(peer_name), bound.get("group_" + peer_name)), name
    except Exception:
        return "?", "?"


def wrap(c10d_py):
    """Wraps send, recv, isend, irecv, batch_isend_irecv and monitored_barrier in
    torch.distributed.distributed_c10d, where the package (importing * from it), the program and
    PyTorch's own send_object_list find them, to record the operations the flight recorder of Gloo
    leaves out; and init_process_group, to start a watcher in a process that has none. P2POp and
    batch_isend_irecv compare an op with the module's isend and irecv, the wrappers then.
    A steady isend/irecv loop (pipeline parallelism) was no progress: a false hang (attack 92)."""
    if getattr(c10d_py, "_ddprun_p2p", False):
        return
    c10d_py._ddprun_p2p = True

    def blocking(fn, op, peer_name):
        import inspect
        signature = inspect.signature(fn)

        def wrapper(*args, **kwargs):
            peer, group = _p2p_args(c10d_py, signature, args, kwargs, peer_name)
            key = _p2p_enter(op, peer, group)
            was, _inner.on = getattr(_inner, "on", False), True
            try:
                return fn(*args, **kwargs)
            finally:
                _inner.on = was
                _p2p_leave(key)
        return wrapper

    def asynchronous(fn, op, peer_name):
        import inspect
        signature = inspect.signature(fn)

        def wrapper(*args, **kwargs):
            work = fn(*args, **kwargs)
            if work is not None and not getattr(_inner, "on", False):
                try:
                    peer, group = _p2p_args(c10d_py, signature, args, kwargs, peer_name)
                    _p2p_enter(op, peer, group, work)  # waiting() sees it finish
                except Exception:
                    pass  # never disturb the job: this one goes unseen
            return work
        return wrapper

    def barrier(fn):
        import inspect
        signature = inspect.signature(fn)

        def wrapper(*args, **kwargs):
            try:
                group = signature.bind_partial(*args, **kwargs).arguments.get("group")
                if group is None:
                    group = c10d_py._get_default_group()
                name = c10d_py._get_process_group_name(group)
            except Exception:
                return fn(*args, **kwargs)  # never disturb the job: this one goes unseen
            _barrier_enter(name, id(group))
            passed = False
            try:
                result = fn(*args, **kwargs)
                passed = True
                return result
            finally:
                _barrier_leave(name, passed)
        return wrapper

    def init(fn):
        def wrapper(*args, **kwargs):
            if on_init_begin is not None:
                on_init_begin()
            result = fn(*args, **kwargs)
            if on_init is not None:
                on_init()  # a forked child (multiprocessing's fork, forkserver): no watcher yet
            return result
        return wrapper

    def batch(fn):
        def wrapper(p2p_op_list, *args, **kwargs):
            was, _inner.on = getattr(_inner, "on", False), True
            try:
                works = fn(p2p_op_list, *args, **kwargs)
            finally:
                _inner.on = was
            try:
                for p, w in zip(p2p_op_list, works or []):
                    op = "send" if "send" in getattr(p.op, "__name__", "") else "recv"
                    group = p.group if p.group is not None else c10d_py._get_default_group()
                    name = c10d_py._get_process_group_name(group)
                    _p2p_enter(op, _peer(c10d_py, group, p.peer, None), name, w)
            except Exception:
                pass  # never disturb the job: these go unseen
            return works
        return wrapper

    package = sys.modules.get("torch.distributed")
    for name, make in (("send", lambda f: blocking(f, "send", "dst")),
                       ("recv", lambda f: blocking(f, "recv", "src")),
                       ("isend", lambda f: asynchronous(f, "send", "dst")),
                       ("irecv", lambda f: asynchronous(f, "recv", "src")),
                       ("batch_isend_irecv", batch),
                       ("monitored_barrier", barrier),
                       ("init_process_group", init)):
        original = getattr(c10d_py, name, None)
        if original is None:
            continue
        wrapped = make(original)
        for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
            try:
                setattr(wrapped, attr, getattr(original, attr))
            except (AttributeError, TypeError):
                pass
        wrapped.__wrapped__ = original
        setattr(c10d_py, name, wrapped)
        if package is not None and getattr(package, name, None) is original:
            setattr(package, name, wrapped)  # imported from it already


class Finder:
    """Finds nothing itself: when torch.distributed.distributed_c10d is first imported, it has the
    usual finder find it and wraps its p2p functions (wrap) as soon as it has run, before
    the package or the program can take them."""
    _NAME = "torch.distributed.distributed_c10d"

    def find_spec(self, name, path, target=None):
        if name != self._NAME or path is None:
            return None
        try:
            sys.meta_path.remove(self)  # once
        except ValueError:
            pass
        import importlib.machinery
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        loader = getattr(spec, "loader", None)
        run = getattr(loader, "exec_module", None)
        if run is None:
            return spec

        def exec_module(module):
            run(module)
            try:
                wrap(module)
            except Exception:
                pass  # never disturb the job: p2p goes unseen
            if on_import is not None:
                on_import()

        loader.exec_module = exec_module
        return spec
