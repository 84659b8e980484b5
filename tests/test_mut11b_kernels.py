"""Tests that kill mutants which survived the area's own tests (session 11 mutation testing of
issue 18's kernels: ``conv_tiles``, ``gemm``'s fast paths, ``rnn_gemm.plan``, ``aot``'s manifest
checks; see docs/design/mutation-testing.md)."""
import numpy as np
import pytest

from tensorweave.kernels.cpu import conv_tiles


def test_a_batch_of_two_is_cut_into_one_image_tiles():
    # the smallest batch that is cut: each tile holds one image's bytes, not the whole budget
    assert conv_tiles.split(2, 16384, 1 << 20, cores=2) == (16384, True)
    assert conv_tiles.split(2, 16384, 1 << 20, cores=1) == (2 * 16384, False)
