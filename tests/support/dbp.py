"""The moment the DBP codec tests write, in each time encoding: ASCII decimal, float64,
and the float32 Hermes writes.
"""

from __future__ import annotations

import struct

from zbus.common.protocols.dbp import TimeEncoding

ASCII = TimeEncoding.ASCII
FLOAT32 = TimeEncoding.FLOAT32
FLOAT64 = TimeEncoding.FLOAT64

T = 1763800000.25
T_ASCII = b"1763800000.25"
T_F64 = struct.pack(">d", T)
# What Hermes writes for the same moment: struct.pack("f", time.time()) on x86.
T_F32 = struct.pack("<f", T)
T32 = struct.unpack("<f", T_F32)[0]  # 1763800064.0: float32 has 128 s steps here
