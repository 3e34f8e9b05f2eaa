; config_hash 0x3af7dd832c2c74b7
; 4 tensors
;     0 a INPUT FP32 (20, 40)
;     1 b INPUT FP32 (40, 24)
;     2 e0_bias INPUT FP32 (24,)
;     3 y OUTPUT FP32 (20, 24)
; 137 instructions
  0  DMA_LOAD  DMA_LOAD   tensor=a dram_offset=0 sram_addr=0x000840 dtype=FP32 shape=(1,16,16) dram_strides=(0,40,1) sram_strides=(0,16,1)
  1  DMA_LOAD  DMA_LOAD   tensor=b dram_offset=0 sram_addr=0x001440 dtype=FP32 shape=(1,16,16) dram_strides=(0,24,1) sram_strides=(0,16,1)
  2  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
  3  DMA_LOAD  DMA_LOAD   tensor=a dram_offset=16 sram_addr=0x000c40 dtype=FP32 shape=(1,16,16) dram_strides=(0,40,1) sram_strides=(0,16,1)
  4  DMA_LOAD  DMA_LOAD   tensor=b dram_offset=384 sram_addr=0x001840 dtype=FP32 shape=(1,16,16) dram_strides=(0,24,1) sram_strides=(0,16,1)
  5  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
  6  DMA_LOAD  DMA_LOAD   tensor=a dram_offset=32 sram_addr=0x001040 dtype=FP32 shape=(1,16,8) dram_strides=(0,40,1) sram_strides=(0,16,1)
  7  DMA_LOAD  DMA_LOAD   tensor=b dram_offset=768 sram_addr=0x001c40 dtype=FP32 shape=(1,8,16) dram_strides=(0,24,1) sram_strides=(0,16,1)
  8  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
  9  TENSOR    WAIT       engine_id=TENSOR sem=1
 10  TENSOR    MATMUL     a_addr=0x000840 a_strides=(16,1) b_addr=0x001440 b_strides=(16,1) c_addr=0x000000 c_strides=(16,1) m=16 n=16 k=16 in_dtype=FP32 accumulate=False
 11  TENSOR    SIGNAL     engine_id=TENSOR sem=6
 12  TENSOR    WAIT       engine_id=TENSOR sem=1
 13  TENSOR    MATMUL     a_addr=0x000c40 a_strides=(16,1) b_addr=0x001840 b_strides=(16,1) c_addr=0x000000 c_strides=(16,1) m=16 n=16 k=16 in_dtype=FP32 accumulate=True
 14  TENSOR    SIGNAL     engine_id=TENSOR sem=6
 15  TENSOR    WAIT       engine_id=TENSOR sem=1
 16  TENSOR    MATMUL     a_addr=0x001040 a_strides=(16,1) b_addr=0x001c40 b_strides=(16,1) c_addr=0x000000 c_strides=(16,1) m=16 n=16 k=8 in_dtype=FP32 accumulate=True
 17  TENSOR    SIGNAL     engine_id=TENSOR sem=8
 18  TENSOR    SIGNAL     engine_id=TENSOR sem=6
 19  DMA_LOAD  DMA_LOAD   tensor=e0_bias dram_offset=0 sram_addr=0x000800 dtype=FP32 shape=(1,1,16) dram_strides=(0,0,1) sram_strides=(0,0,1)
 20  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=2
 21  VECTOR    WAIT       engine_id=VECTOR sem=2
 22  VECTOR    WAIT       engine_id=VECTOR sem=8
 23  VECTOR    VBIAS_ADD  shape=(1,16,16) dst_addr=0x000000 dst_strides=(0,1,16) src_addr=0x000000 src_strides=(0,1,16) bias_addr=0x000800 axis=1 dtype=FP32
 24  VECTOR    SIGNAL     engine_id=VECTOR sem=9
 25  VECTOR    VGELU      shape=(1,16,16) dst_addr=0x000400 dst_strides=(0,1,16) src_addr=0x000000 src_strides=(0,1,16) dtype=FP32
 26  VECTOR    SIGNAL     engine_id=VECTOR sem=10
 27  VECTOR    SIGNAL     engine_id=VECTOR sem=11
 28  DMA_STORE WAIT       engine_id=DMA_STORE sem=10
 29  DMA_STORE DMA_STORE  tensor=y dram_offset=0 sram_addr=0x000400 dtype=FP32 shape=(1,16,16) dram_strides=(0,24,1) sram_strides=(0,16,1)
 30  DMA_STORE SIGNAL     engine_id=DMA_STORE sem=5
 31  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=6
 32  DMA_LOAD  DMA_LOAD   tensor=a dram_offset=0 sram_addr=0x000840 dtype=FP32 shape=(1,16,16) dram_strides=(0,40,1) sram_strides=(0,16,1)
 33  DMA_LOAD  DMA_LOAD   tensor=b dram_offset=16 sram_addr=0x001440 dtype=FP32 shape=(1,16,8) dram_strides=(0,24,1) sram_strides=(0,16,1)
 34  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
 35  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=6
 36  DMA_LOAD  DMA_LOAD   tensor=a dram_offset=16 sram_addr=0x000c40 dtype=FP32 shape=(1,16,16) dram_strides=(0,40,1) sram_strides=(0,16,1)
 37  DMA_LOAD  DMA_LOAD   tensor=b dram_offset=400 sram_addr=0x001840 dtype=FP32 shape=(1,16,8) dram_strides=(0,24,1) sram_strides=(0,16,1)
 38  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
 39  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=6
 40  DMA_LOAD  DMA_LOAD   tensor=a dram_offset=32 sram_addr=0x001040 dtype=FP32 shape=(1,16,8) dram_strides=(0,40,1) sram_strides=(0,16,1)
 41  DMA_LOAD  DMA_LOAD   tensor=b dram_offset=784 sram_addr=0x001c40 dtype=FP32 shape=(1,8,8) dram_strides=(0,24,1) sram_strides=(0,16,1)
 42  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
 43  TENSOR    WAIT       engine_id=TENSOR sem=1
 44  TENSOR    WAIT       engine_id=TENSOR sem=11
 45  TENSOR    MATMUL     a_addr=0x000840 a_strides=(16,1) b_addr=0x001440 b_strides=(16,1) c_addr=0x000000 c_strides=(16,1) m=16 n=8 k=16 in_dtype=FP32 accumulate=False
 46  TENSOR    SIGNAL     engine_id=TENSOR sem=6
 47  TENSOR    WAIT       engine_id=TENSOR sem=1
 48  TENSOR    MATMUL     a_addr=0x000c40 a_strides=(16,1) b_addr=0x001840 b_strides=(16,1) c_addr=0x000000 c_strides=(16,1) m=16 n=8 k=16 in_dtype=FP32 accumulate=True
 49  TENSOR    SIGNAL     engine_id=TENSOR sem=6
 50  TENSOR    WAIT       engine_id=TENSOR sem=1
 51  TENSOR    MATMUL     a_addr=0x001040 a_strides=(16,1) b_addr=0x001c40 b_strides=(16,1) c_addr=0x000000 c_strides=(16,1) m=16 n=8 k=8 in_dtype=FP32 accumulate=True
 52  TENSOR    SIGNAL     engine_id=TENSOR sem=8
 53  TENSOR    SIGNAL     engine_id=TENSOR sem=6
 54  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=9
 55  DMA_LOAD  DMA_LOAD   tensor=e0_bias dram_offset=16 sram_addr=0x000800 dtype=FP32 shape=(1,1,8) dram_strides=(0,0,1) sram_strides=(0,0,1)
 56  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=2
 57  VECTOR    WAIT       engine_id=VECTOR sem=2
 58  VECTOR    WAIT       engine_id=VECTOR sem=8
 59  VECTOR    VBIAS_ADD  shape=(1,8,16) dst_addr=0x000000 dst_strides=(0,1,16) src_addr=0x000000 src_strides=(0,1,16) bias_addr=0x000800 axis=1 dtype=FP32
 60  VECTOR    SIGNAL     engine_id=VECTOR sem=9
 61  VECTOR    WAIT       engine_id=VECTOR sem=5
 62  VECTOR    VGELU      shape=(1,8,16) dst_addr=0x000400 dst_strides=(0,1,16) src_addr=0x000000 src_strides=(0,1,16) dtype=FP32
 63  VECTOR    SIGNAL     engine_id=VECTOR sem=10
 64  VECTOR    SIGNAL     engine_id=VECTOR sem=11
 65  DMA_STORE WAIT       engine_id=DMA_STORE sem=10
 66  DMA_STORE DMA_STORE  tensor=y dram_offset=16 sram_addr=0x000400 dtype=FP32 shape=(1,16,8) dram_strides=(0,24,1) sram_strides=(0,16,1)
 67  DMA_STORE SIGNAL     engine_id=DMA_STORE sem=5
 68  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=6
 69  DMA_LOAD  DMA_LOAD   tensor=a dram_offset=640 sram_addr=0x000840 dtype=FP32 shape=(1,4,16) dram_strides=(0,40,1) sram_strides=(0,16,1)
 70  DMA_LOAD  DMA_LOAD   tensor=b dram_offset=0 sram_addr=0x001440 dtype=FP32 shape=(1,16,16) dram_strides=(0,24,1) sram_strides=(0,16,1)
 71  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
 72  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=6
 73  DMA_LOAD  DMA_LOAD   tensor=a dram_offset=656 sram_addr=0x000c40 dtype=FP32 shape=(1,4,16) dram_strides=(0,40,1) sram_strides=(0,16,1)
 74  DMA_LOAD  DMA_LOAD   tensor=b dram_offset=384 sram_addr=0x001840 dtype=FP32 shape=(1,16,16) dram_strides=(0,24,1) sram_strides=(0,16,1)
 75  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
 76  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=6
 77  DMA_LOAD  DMA_LOAD   tensor=a dram_offset=672 sram_addr=0x001040 dtype=FP32 shape=(1,4,8) dram_strides=(0,40,1) sram_strides=(0,16,1)
 78  DMA_LOAD  DMA_LOAD   tensor=b dram_offset=768 sram_addr=0x001c40 dtype=FP32 shape=(1,8,16) dram_strides=(0,24,1) sram_strides=(0,16,1)
 79  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
 80  TENSOR    WAIT       engine_id=TENSOR sem=1
 81  TENSOR    WAIT       engine_id=TENSOR sem=11
 82  TENSOR    MATMUL     a_addr=0x000840 a_strides=(16,1) b_addr=0x001440 b_strides=(16,1) c_addr=0x000000 c_strides=(16,1) m=4 n=16 k=16 in_dtype=FP32 accumulate=False
 83  TENSOR    SIGNAL     engine_id=TENSOR sem=6
 84  TENSOR    WAIT       engine_id=TENSOR sem=1
 85  TENSOR    MATMUL     a_addr=0x000c40 a_strides=(16,1) b_addr=0x001840 b_strides=(16,1) c_addr=0x000000 c_strides=(16,1) m=4 n=16 k=16 in_dtype=FP32 accumulate=True
 86  TENSOR    SIGNAL     engine_id=TENSOR sem=6
 87  TENSOR    WAIT       engine_id=TENSOR sem=1
 88  TENSOR    MATMUL     a_addr=0x001040 a_strides=(16,1) b_addr=0x001c40 b_strides=(16,1) c_addr=0x000000 c_strides=(16,1) m=4 n=16 k=8 in_dtype=FP32 accumulate=True
 89  TENSOR    SIGNAL     engine_id=TENSOR sem=8
 90  TENSOR    SIGNAL     engine_id=TENSOR sem=6
 91  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=9
 92  DMA_LOAD  DMA_LOAD   tensor=e0_bias dram_offset=0 sram_addr=0x000800 dtype=FP32 shape=(1,1,16) dram_strides=(0,0,1) sram_strides=(0,0,1)
 93  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=2
 94  VECTOR    WAIT       engine_id=VECTOR sem=2
 95  VECTOR    WAIT       engine_id=VECTOR sem=8
 96  VECTOR    VBIAS_ADD  shape=(1,16,4) dst_addr=0x000000 dst_strides=(0,1,16) src_addr=0x000000 src_strides=(0,1,16) bias_addr=0x000800 axis=1 dtype=FP32
 97  VECTOR    SIGNAL     engine_id=VECTOR sem=9
 98  VECTOR    WAIT       engine_id=VECTOR sem=5
 99  VECTOR    VGELU      shape=(1,16,4) dst_addr=0x000400 dst_strides=(0,1,16) src_addr=0x000000 src_strides=(0,1,16) dtype=FP32
100  VECTOR    SIGNAL     engine_id=VECTOR sem=10
101  VECTOR    SIGNAL     engine_id=VECTOR sem=11
102  DMA_STORE WAIT       engine_id=DMA_STORE sem=10
103  DMA_STORE DMA_STORE  tensor=y dram_offset=384 sram_addr=0x000400 dtype=FP32 shape=(1,4,16) dram_strides=(0,24,1) sram_strides=(0,16,1)
104  DMA_STORE SIGNAL     engine_id=DMA_STORE sem=5
105  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=6
106  DMA_LOAD  DMA_LOAD   tensor=a dram_offset=640 sram_addr=0x000840 dtype=FP32 shape=(1,4,16) dram_strides=(0,40,1) sram_strides=(0,16,1)
107  DMA_LOAD  DMA_LOAD   tensor=b dram_offset=16 sram_addr=0x001440 dtype=FP32 shape=(1,16,8) dram_strides=(0,24,1) sram_strides=(0,16,1)
108  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
109  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=6
110  DMA_LOAD  DMA_LOAD   tensor=a dram_offset=656 sram_addr=0x000c40 dtype=FP32 shape=(1,4,16) dram_strides=(0,40,1) sram_strides=(0,16,1)
111  DMA_LOAD  DMA_LOAD   tensor=b dram_offset=400 sram_addr=0x001840 dtype=FP32 shape=(1,16,8) dram_strides=(0,24,1) sram_strides=(0,16,1)
112  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
113  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=6
114  DMA_LOAD  DMA_LOAD   tensor=a dram_offset=672 sram_addr=0x001040 dtype=FP32 shape=(1,4,8) dram_strides=(0,40,1) sram_strides=(0,16,1)
115  DMA_LOAD  DMA_LOAD   tensor=b dram_offset=784 sram_addr=0x001c40 dtype=FP32 shape=(1,8,8) dram_strides=(0,24,1) sram_strides=(0,16,1)
116  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
117  TENSOR    WAIT       engine_id=TENSOR sem=1
118  TENSOR    WAIT       engine_id=TENSOR sem=11
119  TENSOR    MATMUL     a_addr=0x000840 a_strides=(16,1) b_addr=0x001440 b_strides=(16,1) c_addr=0x000000 c_strides=(16,1) m=4 n=8 k=16 in_dtype=FP32 accumulate=False
120  TENSOR    WAIT       engine_id=TENSOR sem=1
121  TENSOR    MATMUL     a_addr=0x000c40 a_strides=(16,1) b_addr=0x001840 b_strides=(16,1) c_addr=0x000000 c_strides=(16,1) m=4 n=8 k=16 in_dtype=FP32 accumulate=True
122  TENSOR    WAIT       engine_id=TENSOR sem=1
123  TENSOR    MATMUL     a_addr=0x001040 a_strides=(16,1) b_addr=0x001c40 b_strides=(16,1) c_addr=0x000000 c_strides=(16,1) m=4 n=8 k=8 in_dtype=FP32 accumulate=True
124  TENSOR    SIGNAL     engine_id=TENSOR sem=8
125  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=9
126  DMA_LOAD  DMA_LOAD   tensor=e0_bias dram_offset=16 sram_addr=0x000800 dtype=FP32 shape=(1,1,8) dram_strides=(0,0,1) sram_strides=(0,0,1)
127  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=2
128  VECTOR    WAIT       engine_id=VECTOR sem=2
129  VECTOR    WAIT       engine_id=VECTOR sem=8
130  VECTOR    VBIAS_ADD  shape=(1,8,4) dst_addr=0x000000 dst_strides=(0,1,16) src_addr=0x000000 src_strides=(0,1,16) bias_addr=0x000800 axis=1 dtype=FP32
131  VECTOR    WAIT       engine_id=VECTOR sem=5
132  VECTOR    VGELU      shape=(1,8,4) dst_addr=0x000400 dst_strides=(0,1,16) src_addr=0x000000 src_strides=(0,1,16) dtype=FP32
133  VECTOR    SIGNAL     engine_id=VECTOR sem=10
134  DMA_STORE WAIT       engine_id=DMA_STORE sem=10
135  DMA_STORE DMA_STORE  tensor=y dram_offset=400 sram_addr=0x000400 dtype=FP32 shape=(1,4,8) dram_strides=(0,24,1) sram_strides=(0,16,1)
136  -         END
