; config_hash 0x3af7dd832c2c74b7
; 4 tensors
;     0 a INPUT FP32 (20, 40)
;     1 b INPUT FP32 (40, 24)
;     2 e0_bias INPUT FP32 (24,)
;     3 y OUTPUT FP32 (20, 24)
; 131 instructions
  0  DMA_LOAD  DMA_LOAD   tensor=a dram_offset=0 sram_addr=0x001480 dtype=FP32 shape=(1,16,16) dram_strides=(0,40,1) sram_strides=(0,16,1)
  1  DMA_LOAD  DMA_LOAD   tensor=b dram_offset=0 sram_addr=0x002080 dtype=FP32 shape=(1,16,16) dram_strides=(0,24,1) sram_strides=(0,16,1)
  2  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
  3  DMA_LOAD  DMA_LOAD   tensor=a dram_offset=16 sram_addr=0x001880 dtype=FP32 shape=(1,16,16) dram_strides=(0,40,1) sram_strides=(0,16,1)
  4  DMA_LOAD  DMA_LOAD   tensor=b dram_offset=384 sram_addr=0x002480 dtype=FP32 shape=(1,16,16) dram_strides=(0,24,1) sram_strides=(0,16,1)
  5  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
  6  DMA_LOAD  DMA_LOAD   tensor=a dram_offset=32 sram_addr=0x001c80 dtype=FP32 shape=(1,16,8) dram_strides=(0,40,1) sram_strides=(0,16,1)
  7  DMA_LOAD  DMA_LOAD   tensor=b dram_offset=768 sram_addr=0x002880 dtype=FP32 shape=(1,8,16) dram_strides=(0,24,1) sram_strides=(0,16,1)
  8  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
  9  TENSOR    WAIT       engine_id=TENSOR sem=1
 10  TENSOR    MATMUL     a_addr=0x001480 a_strides=(16,1) b_addr=0x002080 b_strides=(16,1) c_addr=0x000000 c_strides=(16,1) m=16 n=16 k=16 in_dtype=FP32 accumulate=False
 11  TENSOR    SIGNAL     engine_id=TENSOR sem=6
 12  TENSOR    WAIT       engine_id=TENSOR sem=1
 13  TENSOR    MATMUL     a_addr=0x001880 a_strides=(16,1) b_addr=0x002480 b_strides=(16,1) c_addr=0x000000 c_strides=(16,1) m=16 n=16 k=16 in_dtype=FP32 accumulate=True
 14  TENSOR    SIGNAL     engine_id=TENSOR sem=6
 15  TENSOR    WAIT       engine_id=TENSOR sem=1
 16  TENSOR    MATMUL     a_addr=0x001c80 a_strides=(16,1) b_addr=0x002880 b_strides=(16,1) c_addr=0x000000 c_strides=(16,1) m=16 n=16 k=8 in_dtype=FP32 accumulate=True
 17  TENSOR    SIGNAL     engine_id=TENSOR sem=6
 18  TENSOR    SIGNAL     engine_id=TENSOR sem=8
 19  DMA_LOAD  DMA_LOAD   tensor=e0_bias dram_offset=0 sram_addr=0x001400 dtype=FP32 shape=(1,1,16) dram_strides=(0,0,1) sram_strides=(0,0,1)
 20  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=2
 21  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=6
 22  DMA_LOAD  DMA_LOAD   tensor=a dram_offset=0 sram_addr=0x001480 dtype=FP32 shape=(1,16,16) dram_strides=(0,40,1) sram_strides=(0,16,1)
 23  DMA_LOAD  DMA_LOAD   tensor=b dram_offset=16 sram_addr=0x002080 dtype=FP32 shape=(1,16,8) dram_strides=(0,24,1) sram_strides=(0,16,1)
 24  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
 25  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=6
 26  DMA_LOAD  DMA_LOAD   tensor=a dram_offset=16 sram_addr=0x001880 dtype=FP32 shape=(1,16,16) dram_strides=(0,40,1) sram_strides=(0,16,1)
 27  DMA_LOAD  DMA_LOAD   tensor=b dram_offset=400 sram_addr=0x002480 dtype=FP32 shape=(1,16,8) dram_strides=(0,24,1) sram_strides=(0,16,1)
 28  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
 29  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=6
 30  DMA_LOAD  DMA_LOAD   tensor=a dram_offset=32 sram_addr=0x001c80 dtype=FP32 shape=(1,16,8) dram_strides=(0,40,1) sram_strides=(0,16,1)
 31  DMA_LOAD  DMA_LOAD   tensor=b dram_offset=784 sram_addr=0x002880 dtype=FP32 shape=(1,8,8) dram_strides=(0,24,1) sram_strides=(0,16,1)
 32  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
 33  TENSOR    WAIT       engine_id=TENSOR sem=1
 34  TENSOR    MATMUL     a_addr=0x001480 a_strides=(16,1) b_addr=0x002080 b_strides=(16,1) c_addr=0x000400 c_strides=(16,1) m=16 n=8 k=16 in_dtype=FP32 accumulate=False
 35  TENSOR    SIGNAL     engine_id=TENSOR sem=6
 36  TENSOR    WAIT       engine_id=TENSOR sem=1
 37  TENSOR    MATMUL     a_addr=0x001880 a_strides=(16,1) b_addr=0x002480 b_strides=(16,1) c_addr=0x000400 c_strides=(16,1) m=16 n=8 k=16 in_dtype=FP32 accumulate=True
 38  TENSOR    SIGNAL     engine_id=TENSOR sem=6
 39  TENSOR    WAIT       engine_id=TENSOR sem=1
 40  TENSOR    MATMUL     a_addr=0x001c80 a_strides=(16,1) b_addr=0x002880 b_strides=(16,1) c_addr=0x000400 c_strides=(16,1) m=16 n=8 k=8 in_dtype=FP32 accumulate=True
 41  TENSOR    SIGNAL     engine_id=TENSOR sem=8
 42  TENSOR    SIGNAL     engine_id=TENSOR sem=6
 43  DMA_LOAD  DMA_LOAD   tensor=e0_bias dram_offset=16 sram_addr=0x001440 dtype=FP32 shape=(1,1,8) dram_strides=(0,0,1) sram_strides=(0,0,1)
 44  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=2
 45  VECTOR    WAIT       engine_id=VECTOR sem=2
 46  VECTOR    WAIT       engine_id=VECTOR sem=8
 47  VECTOR    VBIAS_ADD  shape=(1,16,16) dst_addr=0x000800 dst_strides=(0,1,16) src_addr=0x000000 src_strides=(0,1,16) bias_addr=0x001400 axis=1 dtype=FP32
 48  VECTOR    SIGNAL     engine_id=VECTOR sem=11
 49  VECTOR    SIGNAL     engine_id=VECTOR sem=9
 50  VECTOR    VGELU      shape=(1,16,16) dst_addr=0x000c00 dst_strides=(0,1,16) src_addr=0x000800 src_strides=(0,1,16) dtype=FP32
 51  VECTOR    SIGNAL     engine_id=VECTOR sem=10
 52  VECTOR    WAIT       engine_id=VECTOR sem=2
 53  VECTOR    WAIT       engine_id=VECTOR sem=8
 54  VECTOR    VBIAS_ADD  shape=(1,8,16) dst_addr=0x000800 dst_strides=(0,1,16) src_addr=0x000400 src_strides=(0,1,16) bias_addr=0x001440 axis=1 dtype=FP32
 55  VECTOR    SIGNAL     engine_id=VECTOR sem=11
 56  VECTOR    SIGNAL     engine_id=VECTOR sem=9
 57  VECTOR    VGELU      shape=(1,8,16) dst_addr=0x001000 dst_strides=(0,1,16) src_addr=0x000800 src_strides=(0,1,16) dtype=FP32
 58  VECTOR    SIGNAL     engine_id=VECTOR sem=10
 59  DMA_STORE WAIT       engine_id=DMA_STORE sem=10
 60  DMA_STORE DMA_STORE  tensor=y dram_offset=0 sram_addr=0x000c00 dtype=FP32 shape=(1,16,16) dram_strides=(0,24,1) sram_strides=(0,16,1)
 61  DMA_STORE SIGNAL     engine_id=DMA_STORE sem=5
 62  DMA_STORE WAIT       engine_id=DMA_STORE sem=10
 63  DMA_STORE DMA_STORE  tensor=y dram_offset=16 sram_addr=0x001000 dtype=FP32 shape=(1,16,8) dram_strides=(0,24,1) sram_strides=(0,16,1)
 64  DMA_STORE SIGNAL     engine_id=DMA_STORE sem=5
 65  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=6
 66  DMA_LOAD  DMA_LOAD   tensor=a dram_offset=640 sram_addr=0x001480 dtype=FP32 shape=(1,4,16) dram_strides=(0,40,1) sram_strides=(0,16,1)
 67  DMA_LOAD  DMA_LOAD   tensor=b dram_offset=0 sram_addr=0x002080 dtype=FP32 shape=(1,16,16) dram_strides=(0,24,1) sram_strides=(0,16,1)
 68  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
 69  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=6
 70  DMA_LOAD  DMA_LOAD   tensor=a dram_offset=656 sram_addr=0x001880 dtype=FP32 shape=(1,4,16) dram_strides=(0,40,1) sram_strides=(0,16,1)
 71  DMA_LOAD  DMA_LOAD   tensor=b dram_offset=384 sram_addr=0x002480 dtype=FP32 shape=(1,16,16) dram_strides=(0,24,1) sram_strides=(0,16,1)
 72  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
 73  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=6
 74  DMA_LOAD  DMA_LOAD   tensor=a dram_offset=672 sram_addr=0x001c80 dtype=FP32 shape=(1,4,8) dram_strides=(0,40,1) sram_strides=(0,16,1)
 75  DMA_LOAD  DMA_LOAD   tensor=b dram_offset=768 sram_addr=0x002880 dtype=FP32 shape=(1,8,16) dram_strides=(0,24,1) sram_strides=(0,16,1)
 76  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
 77  TENSOR    WAIT       engine_id=TENSOR sem=1
 78  TENSOR    WAIT       engine_id=TENSOR sem=11
 79  TENSOR    MATMUL     a_addr=0x001480 a_strides=(16,1) b_addr=0x002080 b_strides=(16,1) c_addr=0x000000 c_strides=(16,1) m=4 n=16 k=16 in_dtype=FP32 accumulate=False
 80  TENSOR    SIGNAL     engine_id=TENSOR sem=6
 81  TENSOR    WAIT       engine_id=TENSOR sem=1
 82  TENSOR    MATMUL     a_addr=0x001880 a_strides=(16,1) b_addr=0x002480 b_strides=(16,1) c_addr=0x000000 c_strides=(16,1) m=4 n=16 k=16 in_dtype=FP32 accumulate=True
 83  TENSOR    SIGNAL     engine_id=TENSOR sem=6
 84  TENSOR    WAIT       engine_id=TENSOR sem=1
 85  TENSOR    MATMUL     a_addr=0x001c80 a_strides=(16,1) b_addr=0x002880 b_strides=(16,1) c_addr=0x000000 c_strides=(16,1) m=4 n=16 k=8 in_dtype=FP32 accumulate=True
 86  TENSOR    SIGNAL     engine_id=TENSOR sem=6
 87  TENSOR    SIGNAL     engine_id=TENSOR sem=8
 88  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=9
 89  DMA_LOAD  DMA_LOAD   tensor=e0_bias dram_offset=0 sram_addr=0x001400 dtype=FP32 shape=(1,1,16) dram_strides=(0,0,1) sram_strides=(0,0,1)
 90  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=2
 91  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=6
 92  DMA_LOAD  DMA_LOAD   tensor=a dram_offset=640 sram_addr=0x001480 dtype=FP32 shape=(1,4,16) dram_strides=(0,40,1) sram_strides=(0,16,1)
 93  DMA_LOAD  DMA_LOAD   tensor=b dram_offset=16 sram_addr=0x002080 dtype=FP32 shape=(1,16,8) dram_strides=(0,24,1) sram_strides=(0,16,1)
 94  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
 95  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=6
 96  DMA_LOAD  DMA_LOAD   tensor=a dram_offset=656 sram_addr=0x001880 dtype=FP32 shape=(1,4,16) dram_strides=(0,40,1) sram_strides=(0,16,1)
 97  DMA_LOAD  DMA_LOAD   tensor=b dram_offset=400 sram_addr=0x002480 dtype=FP32 shape=(1,16,8) dram_strides=(0,24,1) sram_strides=(0,16,1)
 98  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
 99  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=6
100  DMA_LOAD  DMA_LOAD   tensor=a dram_offset=672 sram_addr=0x001c80 dtype=FP32 shape=(1,4,8) dram_strides=(0,40,1) sram_strides=(0,16,1)
101  DMA_LOAD  DMA_LOAD   tensor=b dram_offset=784 sram_addr=0x002880 dtype=FP32 shape=(1,8,8) dram_strides=(0,24,1) sram_strides=(0,16,1)
102  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
103  TENSOR    WAIT       engine_id=TENSOR sem=1
104  TENSOR    WAIT       engine_id=TENSOR sem=11
105  TENSOR    MATMUL     a_addr=0x001480 a_strides=(16,1) b_addr=0x002080 b_strides=(16,1) c_addr=0x000400 c_strides=(16,1) m=4 n=8 k=16 in_dtype=FP32 accumulate=False
106  TENSOR    WAIT       engine_id=TENSOR sem=1
107  TENSOR    MATMUL     a_addr=0x001880 a_strides=(16,1) b_addr=0x002480 b_strides=(16,1) c_addr=0x000400 c_strides=(16,1) m=4 n=8 k=16 in_dtype=FP32 accumulate=True
108  TENSOR    WAIT       engine_id=TENSOR sem=1
109  TENSOR    MATMUL     a_addr=0x001c80 a_strides=(16,1) b_addr=0x002880 b_strides=(16,1) c_addr=0x000400 c_strides=(16,1) m=4 n=8 k=8 in_dtype=FP32 accumulate=True
110  TENSOR    SIGNAL     engine_id=TENSOR sem=8
111  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=9
112  DMA_LOAD  DMA_LOAD   tensor=e0_bias dram_offset=16 sram_addr=0x001440 dtype=FP32 shape=(1,1,8) dram_strides=(0,0,1) sram_strides=(0,0,1)
113  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=2
114  VECTOR    WAIT       engine_id=VECTOR sem=2
115  VECTOR    WAIT       engine_id=VECTOR sem=8
116  VECTOR    VBIAS_ADD  shape=(1,16,4) dst_addr=0x000800 dst_strides=(0,1,16) src_addr=0x000000 src_strides=(0,1,16) bias_addr=0x001400 axis=1 dtype=FP32
117  VECTOR    WAIT       engine_id=VECTOR sem=5
118  VECTOR    VGELU      shape=(1,16,4) dst_addr=0x000c00 dst_strides=(0,1,16) src_addr=0x000800 src_strides=(0,1,16) dtype=FP32
119  VECTOR    SIGNAL     engine_id=VECTOR sem=10
120  VECTOR    WAIT       engine_id=VECTOR sem=2
121  VECTOR    WAIT       engine_id=VECTOR sem=8
122  VECTOR    VBIAS_ADD  shape=(1,8,4) dst_addr=0x000800 dst_strides=(0,1,16) src_addr=0x000400 src_strides=(0,1,16) bias_addr=0x001440 axis=1 dtype=FP32
123  VECTOR    WAIT       engine_id=VECTOR sem=5
124  VECTOR    VGELU      shape=(1,8,4) dst_addr=0x001000 dst_strides=(0,1,16) src_addr=0x000800 src_strides=(0,1,16) dtype=FP32
125  VECTOR    SIGNAL     engine_id=VECTOR sem=10
126  DMA_STORE WAIT       engine_id=DMA_STORE sem=10
127  DMA_STORE DMA_STORE  tensor=y dram_offset=384 sram_addr=0x000c00 dtype=FP32 shape=(1,4,16) dram_strides=(0,24,1) sram_strides=(0,16,1)
128  DMA_STORE WAIT       engine_id=DMA_STORE sem=10
129  DMA_STORE DMA_STORE  tensor=y dram_offset=400 sram_addr=0x001000 dtype=FP32 shape=(1,4,8) dram_strides=(0,24,1) sram_strides=(0,16,1)
130  -         END
