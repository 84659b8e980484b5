"""Asking the CPU for a table's row before a compiled loop reaches it: :func:`row` (:func:`ahead`
for a row loop's tables).

The sparse Adam update of an embedding (``training_kernels._adam_rows``) and the sum of its
gradient's duplicate rows (``UniqueSegmentSum``'s ``_segment_sum_rows``) visit rows of tables
of megabytes in an order only the index array knows (sorted, with gaps). In a training step the
tables are out of cache by the time the update runs, and each row's loads wait for memory one
row at a time: fasttext's sparse Adam (9,500 rows of 50 floats of three 20000x50 tables) took
~1.25 ms in its step against ~0.5 ms on warm tables (issue 18, session 24, AMD EPYC). Asking for
the row :data:`AHEAD` rows further on (LLVM's ``llvm.prefetch``: ``prefetcht0``/``prefetchw`` on
x86, ``prfm`` on AArch64; dropped where a target has none) overlaps those waits: 1.25 -> 0.78 ms.

A prefetch is a hint: it loads nothing into the program's values and cannot fault, so the
results are the loop's bits without it, and an index past the table only wastes the hint.

>>> import numpy as np
>>> from tensorweave.kernels.cpu.jit import njit
>>> from tensorweave.kernels.cpu import prefetch
>>> @njit
... def total(table, idx):
...     s = 0.0
...     for r in range(idx.shape[0]):
...         if r + prefetch.AHEAD < idx.shape[0]:
...             prefetch.row(table, idx[r + prefetch.AHEAD])
...         s += table[idx[r]].sum()
...     return s
>>> float(total(np.ones((100, 3)), np.arange(0, 100, 7)))
45.0
"""
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from tensorweave.kernels.cpu.jit import njit


@njit(inline="always")      # (as a call it lost a third of the gain)
def ahead(tables, idx, r):
    """Hints row ``idx[r + AHEAD]`` of each table of the tuple ``tables`` (of one array type) where
    ``idx`` has such an entry: the call a row loop over ``idx`` makes at row ``r``. The sparse SGD,
    Adagrad and RMSprop updates on fasttext's tables (9,500 of 20,000 rows of 50 float32, out of
    cache): 612 -> 442, 1,038 -> 775, 1,605 -> 1,121 µs (thread CPU, AMD EPYC Zen 4, session 25)."""
    if r + AHEAD < idx.shape[0]:
        k = idx[r + AHEAD]
        for table in tables:
            row(table, k)


#: rows ahead of the one being updated that are asked for (sparse Adam on fasttext's tables, warm:
#: 2 and 4 level, 8 slower; 4 measured in the fasttext and gru steps)
AHEAD = 4
#: the cache line the hints step by (64 bytes on x86-64 and the common AArch64 cores; a larger
#: line just gets asked for twice)
LINE = 64


@intrinsic
def row(typingctx, table, index):
    """Hints that row ``index`` of the 2-D ``table`` will be written soon: one prefetch (for
    writing, kept in every cache level) per cache line of the row."""
    if not (isinstance(table, types.Array) and table.ndim == 2 and isinstance(index, types.Integer)):
        return None
    sig = types.void(table, index)

    def codegen(context, builder, signature, args):
        kind = signature.args[0]
        array = context.make_array(kind)(context, builder, args[0])
        i64, i32 = ir.IntType(64), ir.IntType(32)
        i = context.cast(builder, args[1], signature.args[1], types.int64)
        start = builder.add(builder.ptrtoint(array.data, i64),
                            builder.mul(i, builder.extract_value(array.strides, 0)))
        size = builder.mul(builder.extract_value(array.shape, 1), ir.Constant(i64, kind.dtype.bitwidth // 8))
        first = builder.and_(start, ir.Constant(i64, -LINE))           # the line holding the row's first byte
        end = builder.add(builder.add(start, size), ir.Constant(i64, LINE - 1))
        lines = builder.udiv(builder.sub(end, first), ir.Constant(i64, LINE))     # lines the row touches
        i8p = ir.IntType(8).as_pointer()
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                            "llvm.prefetch.p0i8")
        with cgutils.for_range(builder, lines) as loop:
            at = builder.inttoptr(builder.add(first, builder.mul(loop.index, ir.Constant(i64, LINE))), i8p)
            # (address, 1 = for writing, 3 = keep in all levels, 1 = data)
            builder.call(fn, [at, ir.Constant(i32, 1), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()
    return sig, codegen
