"""The parameter-server actor: shards of variables, their optimizer state, pull and push.

One :class:`ParameterServer` per ``ps`` task of a ``ParameterServerStrategy``: an asyncio
Ray actor (its methods run one at a time on one thread, so an update is never seen half
done; a pull that waits for a synchronous round yields to the pushes that complete it).

- ``create(key, shard, value, name)``: a shard becomes a ``tw.Variable`` here.
- ``pull(key, shard, rows, min_version)``: the shard, or rows of it (NumPy, through Ray's
  object store), once ``version >= min_version``; ``pull_many`` several in one call.
- ``push(optimizer, round, slot, num_slots, trained, parts, rate)``: gradients of shards, each
  ``(key, shard, rows or None, values)``, and the learning rate to apply them with (None: the
  optimizer's schedule; in a synchronous round the rate of its first slot). Asynchronous (``round`` None): applied at once
  with the optimizer (a Keras optimizer rebuilt here from its config, built for every shard
  of this server, one per optimizer config). Synchronous: kept until every slot of the round
  has pushed, then the average of the slots' gradients (summed in slot order, so the result
  does not depend on arrival order) is applied once and ``version`` goes up by one; a push for
  a round already applied (a step re-run after its worker died) is ignored.
- ``save(path)``/``restore(path)``: the shards, optimizer variables and version as
  safetensors (plain arrays, no pickle). With a checkpoint path every change (``create``,
  ``assign``, ``push``) is also written to a journal before it is applied (``journal.py``), and
  a save empties the journal: an actor restarted by Ray (after ``kill -9``) loads the last save
  and replays the journal, so it has exactly the state it had when it died, half-complete
  synchronous rounds included; the calls that were in flight are sent again by Ray (a
  synchronous push seen twice is ignored, so synchronous training continues as if nothing had
  happened: final weights equal a failure-free run; asynchronous pushes are at-least-once).
"""
import asyncio
import json
import os

import numpy as np

from tensorweave.ops.variables import Variable


class ParameterServer:
    def __init__(self, index, checkpoint_path=None):
        self.index = int(index)
        self.version = 0
        self._vars = {}            # (key, shard) -> tw.Variable
        self._names = {}           # (key, shard) -> name
        self._optimizers = {}      # optimizer config (JSON, a numeric rate left out: _identity) -> optimizer
        self._pending = {}         # round -> {slot: (optimizer key, trained, parts)}
        self._round_slots = {}     # round -> its number of slots
        self._global_steps = {}    # optimizer identity -> asynchronous steps taken (server 0: take_step)
        self._cond = None
        self._checkpoint_path = checkpoint_path
        self.restored = False
        self._journal = None
        if checkpoint_path and os.path.exists(checkpoint_path):
            self._restore(checkpoint_path)
            self.restored = True
        if checkpoint_path:
            self.restored |= self._replay(checkpoint_path + ".journal")
            from tensorweave.distribute.ps.journal import Journal
            self._journal = Journal(checkpoint_path + ".journal")

    def _condition(self):
        if self._cond is None:
            self._cond = asyncio.Condition()
        return self._cond

    # ---- variables ----------------------------------------------------------------------------
    async def create(self, key, shard, value, name):
        self._log({"op": "create", "key": key, "shard": int(shard), "name": name}, [np.asarray(value)])
        self._create(key, shard, value, name)

    def _create(self, key, shard, value, name):
        import tensorweave as tw
        self._vars[(key, int(shard))] = tw.Variable(np.asarray(value), name=f"{name}/part_{shard}")
        self._names[(key, int(shard))] = f"{name}/part_{shard}"

    async def assign(self, key, shard, value):
        self._log({"op": "assign", "key": key, "shard": int(shard)}, [np.asarray(value)])
        self._var(key, shard).assign(np.asarray(value))

    def _var(self, key, shard):
        v = self._vars.get((key, int(shard)))
        if v is None:
            hint = (" It was restarted from a checkpoint saved before this variable existed: call strategy.save() "
                    "after creating the model" if self.restored else "")
            raise KeyError(f"parameter server {self.index} holds no shard {shard} of variable {key}.{hint}")
        return v

    async def pull(self, key, shard, rows, min_version=0):
        if min_version > self.version:
            cond = self._condition()
            async with cond:
                await cond.wait_for(lambda: self.version >= min_version)
        value = self._var(key, shard).numpy()
        return value.copy() if rows is None else value[np.asarray(rows)]

    async def pull_many(self, requests, min_version=0):
        """``[pull(key, shard, rows) for each request]`` in one call."""
        if min_version > self.version:
            cond = self._condition()
            async with cond:
                await cond.wait_for(lambda: self.version >= min_version)
        out = []
        for key, shard, rows in requests:
            value = self._var(key, shard).numpy()
            out.append(value.copy() if rows is None else value[np.asarray(rows)])
        return out

    async def shapes(self):
        """``{shard name: shape}`` of what this server holds."""
        return {self._names[k]: tuple(v.shape.as_list()) for k, v in self._vars.items()}

    async def get_version(self):
        return self.version

    async def ping(self):
        """``(index, pid, restored from a checkpoint)``."""
        return self.index, os.getpid(), self.restored

    # ---- updates ------------------------------------------------------------------------------
    def _optimizer(self, key):
        """The optimizer of config ``key``, built for every shard here. Its identity leaves out a
        learning rate that is a number (pushes carry the rate: ``optimizer.learning_rate = x`` on
        the coordinator keeps the optimizer's slots here)."""
        ident = _identity(key)
        opt = self._optimizers.get(ident)
        if opt is None:
            from tensorweave.keras import optimizers
            opt = self._optimizers[ident] = optimizers.deserialize(json.loads(key))
            opt.build([self._vars[k] for k in sorted(self._vars)])
        return opt

    async def take_step(self, key):
        """The global step of an asynchronous push of optimizer ``key`` (server 0 counts them for
        every server, as TF's one ``iterations`` variable on a parameter server): its number,
        counted from 0 in the order the workers asked."""
        ident = _identity(key)
        n = self._global_steps.get(ident, 0)
        self._log({"op": "step", "key": key, "step": n}, [])
        self._global_steps[ident] = n + 1
        return n

    def _apply(self, key, contributions, scale, rate=None, step=None):
        """Applies the gradients of ``contributions`` (lists of parts), summed in order and
        multiplied by ``scale``, with learning rate ``rate`` (None: the optimizer's schedule) at
        global step ``step`` (asynchronous pushes; None: this server's own count, the rounds'); a step counts even when this server
        got no gradient."""
        import tensorweave as tw
        dense, sparse = {}, {}
        for parts in contributions:
            for vkey, shard, rows, values in parts:
                k = (vkey, int(shard))
                if rows is None:
                    dense[k] = values if k not in dense else dense[k] + values
                else:
                    sparse.setdefault(k, []).append((np.asarray(rows, np.int64), values))
        opt = self._optimizer(key)
        if rate is not None:
            opt.learning_rate = float(rate)
        if step is not None:        # a schedule (and Adam's bias correction) at the global step
            opt.iterations.assign(np.int64(step))
        pairs = []
        for k, g in dense.items():
            pairs.append((tw.constant(g * scale if scale != 1 else g), self._var(*k)))
        for k, chunks in sparse.items():
            if k in dense:
                raise ValueError(f"parameter server {self.index}: dense and sparse gradients for {self._names[k]}")
            rows = np.concatenate([r for r, _ in chunks])
            values = np.concatenate([v for _, v in chunks])
            if scale != 1:
                values = values * values.dtype.type(scale)
            var = self._var(*k)
            pairs.append((tw.IndexedSlices(tw.constant(values), tw.constant(rows), var.shape.as_list()), var))
        if pairs:
            opt.apply_gradients(pairs)
        else:
            opt.iterations.assign_add(np.int64(1))

    async def push(self, key, round, slot, num_slots, trained, parts, rate=None, step=None):
        if round is not None and round < self.version:
            return self.version                      # a re-run of a step whose round was applied
        self._log_push(key, round, slot, num_slots, trained, parts, rate, step)
        if self._push(key, round, slot, num_slots, trained, parts, rate, step):
            cond = self._condition()
            async with cond:
                cond.notify_all()
        return self.version

    def _push(self, key, round, slot, num_slots, trained, parts, rate=None, step=None):
        """Applies or keeps a push; True when a round (or an asynchronous update) was applied."""
        if round is None:
            self._apply(key, [parts], 1, rate, step)
            self.version += 1
            return True
        if round < self.version:
            return False
        self._pending.setdefault(int(round), {})[int(slot)] = (key, trained, parts, rate)
        self._round_slots[int(round)] = int(num_slots)
        applied = False
        while len(self._pending.get(self.version, ())) == num_slots:
            got = self._pending.pop(self.version)
            self._round_slots.pop(self.version, None)
            entries = [got[s] for s in range(num_slots)]
            keys = {_identity(k): k for k, t, _, _ in entries if t}
            if len(keys) > 1:
                raise ValueError(f"parameter server {self.index}: workers used different optimizers in one round")
            if keys:
                rate = next(r for _, t, _, r in entries if t)        # the round's first trained slot's
                self._apply(keys.popitem()[1], [p for _, t, p, _ in entries if t], 1.0 / num_slots, rate)
            self.version += 1
            applied = True
        return applied

    # ---- the journal ------------------------------------------------------------------------
    def _log(self, header, arrays):
        if self._journal is not None:
            self._journal.append(header, arrays)

    def _log_push(self, key, round, slot, num_slots, trained, parts, rate=None, step=None):
        self._log({"op": "push", "key": key, "round": round, "slot": int(slot), "num_slots": int(num_slots),
                   "trained": bool(trained), "rate": rate, "step": step,
                   "parts": [[k, int(i), rows is not None] for k, i, rows, _ in parts]},
                  [np.asarray(a) for _, _, rows, values in parts for a in ([] if rows is None else [rows]) + [values]])

    def _replay(self, path):
        """Re-applies the journal's records (the changes since the last save); True if any."""
        from tensorweave.distribute.ps.journal import read
        any_record = False
        for header, arrays in read(path):
            any_record = True
            op = header["op"]
            if op == "create":
                self._create(header["key"], header["shard"], arrays[0], header["name"])
            elif op == "assign":
                self._var(header["key"], header["shard"]).assign(arrays[0])
            elif op == "step":
                self._global_steps[_identity(header["key"])] = int(header["step"]) + 1
            else:
                parts, it = [], iter(arrays)
                for vkey, shard, has_rows in header["parts"]:
                    rows = next(it) if has_rows else None
                    parts.append((vkey, shard, rows, next(it)))
                self._push(header["key"], header["round"], header["slot"], header["num_slots"], header["trained"],
                           parts, header.get("rate"), header.get("step"))
        return any_record

    # ---- checkpoints --------------------------------------------------------------------------
    async def save(self, path=None):
        """Writes shards, optimizer variables and the version to ``path`` (safetensors)."""
        from safetensors.numpy import save_file
        path = path or self._checkpoint_path
        tensors, meta = {}, {"version": str(self.version), "optimizers": json.dumps(list(self._optimizers)),
                             "global_steps": json.dumps(self._global_steps)}
        for (vkey, shard), v in self._vars.items():
            tensors[f"var/{vkey}/{shard}"] = np.array(v.numpy(), order="C")     # (ascontiguousarray makes 0-d 1-d)
            meta[f"name/{vkey}/{shard}"] = self._names[(vkey, shard)]
        keys = {id(v): k for k, v in self._vars.items()}
        for i, opt in enumerate(self._optimizers.values()):
            # slots by (shard, slot name), not by position: an optimizer built in several goes
            # (shards made after its first build) orders them differently from a fresh build
            tensors[f"opt/{i}/iterations"] = np.array(opt.iterations.numpy())
            if isinstance(opt._learning_rate, Variable):
                tensors[f"opt/{i}/learning_rate"] = np.array(opt._learning_rate.numpy())
            for (vid, slot_name), slot in opt._slots.items():
                vkey, shard = keys[vid]
                tensors[f"opt/{i}/slot/{vkey}/{shard}/{slot_name}"] = np.array(slot.numpy(), order="C")
        tmp = path + ".tmp"
        save_file(tensors, tmp, metadata=meta)
        os.replace(tmp, path)
        if self._journal is not None and path == self._checkpoint_path:
            # the save holds every applied change; the pushes of rounds not complete yet are
            # not in it (their workers will not push them again): they start the new journal
            self._journal.truncate()
            for r, slots in sorted(self._pending.items()):
                for slot, (key, trained, parts, rate) in sorted(slots.items()):
                    self._log_push(key, r, slot, self._round_slots[r], trained, parts, rate)
        return self.version

    def _restore(self, path):
        import tensorweave as tw
        from safetensors import safe_open
        with safe_open(path, "numpy") as f:
            meta = f.metadata()
            names = list(f.keys())
            self.version = int(meta["version"])
            self._global_steps = json.loads(meta.get("global_steps", "{}"))
            for n in names:
                if n.startswith("var/"):
                    _, vkey, shard = n.split("/")
                    k = (vkey, int(shard))
                    self._names[k] = meta[f"name/{vkey}/{shard}"]
                    self._vars[k] = tw.Variable(f.get_tensor(n), name=self._names[k])
            for i, key in enumerate(json.loads(meta["optimizers"])):
                opt = self._optimizer(key)
                opt.iterations.assign(f.get_tensor(f"opt/{i}/iterations"))
                if f"opt/{i}/learning_rate" in names:
                    opt._learning_rate.assign(f.get_tensor(f"opt/{i}/learning_rate"))
                for n in names:
                    if n.startswith(f"opt/{i}/slot/"):
                        _, _, _, vkey, shard, slot_name = n.split("/", 5)
                        opt._slots[(id(self._vars[(vkey, int(shard))]), slot_name)].assign(f.get_tensor(n))


def _identity(key):
    """An optimizer key (its JSON config) with a learning rate that is a number set to 0."""
    if key is None:
        return None
    config = json.loads(key)
    inner = config.get("config", {})
    if isinstance(inner.get("learning_rate"), (int, float)):
        inner["learning_rate"] = 0.0
    return json.dumps(config, sort_keys=True)

