#!/usr/bin/env python3
"""Writes the .npy fixtures that tests/test_npy.cpp reads, with real numpy.

The files are committed, so the tests need no Python; rerun this only to add
a fixture (python3 tests/data/npy/make_fixtures.py, numpy >= 1.22 for the
header padding the byte-for-byte tests expect). Values are simple formulas so
the C++ test can state them; every file stays well under 1 KB.
"""
import os

import numpy as np
from numpy.lib import format as npformat

HERE = os.path.dirname(os.path.abspath(__file__))


def save(name, array, version=None):
    path = os.path.join(HERE, name)
    if version is None:
        np.save(path, array)  # numpy's default: version 1.0, C order unless Fortran-contiguous
    else:
        with open(path, "wb") as f:
            npformat.write_array(f, array, version=version)


def main():
    # Readable, supported: one per dtype, ranks 0 to 4, an empty array.
    save("f4_2x3.npy", (np.arange(6, dtype="<f4") * 0.5 - 1.0).reshape(2, 3))
    save("f2_5.npy", np.array([-0.5, 0.25, 65504.0, 2.0**-24, -np.inf], dtype="<f2"))
    save("f8_scalar.npy", np.array(3.25, dtype="<f8"))
    save("i4_2x2x2.npy", (np.arange(8, dtype="<i4") - 4).reshape(2, 2, 2))
    save("i8_1x2x3x1.npy", (np.arange(6, dtype="<i8") * 10**10).reshape(1, 2, 3, 1))
    save("u1_4.npy", np.array([0, 1, 127, 255], dtype="|u1"))
    save("u2_2x2.npy", np.array([[0, 1], [65535, 300]], dtype="<u2"))
    save("f4_0x3.npy", np.zeros((0, 3), dtype="<f4"))
    # Rank 16: numpy's spare room for shape[0] pushes this header past a
    # 64-byte boundary, so the byte-for-byte test sees that padding.
    save("f4_rank16.npy", np.arange(6, dtype="<f4").reshape((2,) + (1,) * 14 + (3,)))
    # Format versions 2.0 (uint32 header length) and 3.0 (UTF-8 header).
    save("v2_f4_3.npy", np.array([1, 2, 3], dtype="<f4"), version=(2, 0))
    save("v3_f4_3.npy", np.array([1, 2, 3], dtype="<f4"), version=(3, 0))
    # Well-formed but unsupported.
    save("fortran_f4_2x3.npy", np.asfortranarray(np.arange(6, dtype="<f4").reshape(2, 3)))
    save("be_f4_3.npy", np.array([1, 2, 3], dtype=">f4"))
    save("c8_2.npy", np.array([1 + 2j, 3 - 4j], dtype="<c8"))


if __name__ == "__main__":
    main()
