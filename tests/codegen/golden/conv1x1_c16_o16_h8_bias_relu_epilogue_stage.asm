; config_hash 0x3af7dd832c2c74b7
; 4 tensors
;     0 x INPUT FP32 (1, 16, 8, 8)
;     1 w INPUT FP32 (16, 16, 1, 1)
;     2 e0_bias INPUT FP32 (16,)
;     3 y OUTPUT FP32 (1, 16, 8, 8)
; 74 instructions
 0  DMA_LOAD  DMA_LOAD   tensor=w dram_offset=0 sram_addr=0x000000 dtype=FP32 shape=(1,1,256) dram_strides=(0,0,1) sram_strides=(0,0,1)
 1  DMA_LOAD  DMA_LOAD   tensor=x dram_offset=0 sram_addr=0x000400 dtype=FP32 shape=(1,16,16) dram_strides=(0,64,1) sram_strides=(0,16,1)
 2  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
 3  DMA_LOAD  DMA_LOAD   tensor=x dram_offset=16 sram_addr=0x000800 dtype=FP32 shape=(1,16,16) dram_strides=(0,64,1) sram_strides=(0,16,1)
 4  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
 5  TENSOR    WAIT       engine_id=TENSOR sem=1
 6  TENSOR    CONV       in_addr=0x000400 in_strides=(16,8,1) in_c=16 in_h=2 in_w=8 w_addr=0x000000 w_strides=(16,1,1,1) out_addr=0x000c00 out_strides=(16,8,1) out_c=16 out_h=2 out_w=8 kernel_h=1 kernel_w=1 stride_h=1 stride_w=1 dilation_h=1 dilation_w=1 pad_top=0 pad_left=0 pad_bottom=0 pad_right=0 groups=1 in_dtype=FP32 accumulate=False pad_value=0
 7  TENSOR    SIGNAL     engine_id=TENSOR sem=6
 8  TENSOR    SIGNAL     engine_id=TENSOR sem=8
 9  DMA_LOAD  DMA_LOAD   tensor=e0_bias dram_offset=0 sram_addr=0x002000 dtype=FP32 shape=(1,1,16) dram_strides=(0,0,1) sram_strides=(0,0,1)
10  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=2
11  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=6
12  DMA_LOAD  DMA_LOAD   tensor=x dram_offset=32 sram_addr=0x000400 dtype=FP32 shape=(1,16,16) dram_strides=(0,64,1) sram_strides=(0,16,1)
13  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
14  TENSOR    WAIT       engine_id=TENSOR sem=1
15  TENSOR    CONV       in_addr=0x000800 in_strides=(16,8,1) in_c=16 in_h=2 in_w=8 w_addr=0x000000 w_strides=(16,1,1,1) out_addr=0x001000 out_strides=(16,8,1) out_c=16 out_h=2 out_w=8 kernel_h=1 kernel_w=1 stride_h=1 stride_w=1 dilation_h=1 dilation_w=1 pad_top=0 pad_left=0 pad_bottom=0 pad_right=0 groups=1 in_dtype=FP32 accumulate=False pad_value=0
16  TENSOR    SIGNAL     engine_id=TENSOR sem=6
17  TENSOR    SIGNAL     engine_id=TENSOR sem=8
18  DMA_LOAD  DMA_LOAD   tensor=e0_bias dram_offset=0 sram_addr=0x002040 dtype=FP32 shape=(1,1,16) dram_strides=(0,0,1) sram_strides=(0,0,1)
19  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=2
20  VECTOR    WAIT       engine_id=VECTOR sem=2
21  VECTOR    WAIT       engine_id=VECTOR sem=8
22  VECTOR    VBIAS_ADD  shape=(8,2,16) dst_addr=0x001400 dst_strides=(1,8,16) src_addr=0x000c00 src_strides=(1,8,16) bias_addr=0x002000 axis=2 dtype=FP32
23  VECTOR    SIGNAL     engine_id=VECTOR sem=11
24  VECTOR    SIGNAL     engine_id=VECTOR sem=9
25  VECTOR    VRELU      shape=(8,2,16) dst_addr=0x001800 dst_strides=(1,8,16) src_addr=0x001400 src_strides=(1,8,16) dtype=FP32
26  VECTOR    SIGNAL     engine_id=VECTOR sem=10
27  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=6
28  DMA_LOAD  DMA_LOAD   tensor=x dram_offset=48 sram_addr=0x000800 dtype=FP32 shape=(1,16,16) dram_strides=(0,64,1) sram_strides=(0,16,1)
29  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
30  TENSOR    WAIT       engine_id=TENSOR sem=1
31  TENSOR    WAIT       engine_id=TENSOR sem=11
32  TENSOR    CONV       in_addr=0x000400 in_strides=(16,8,1) in_c=16 in_h=2 in_w=8 w_addr=0x000000 w_strides=(16,1,1,1) out_addr=0x000c00 out_strides=(16,8,1) out_c=16 out_h=2 out_w=8 kernel_h=1 kernel_w=1 stride_h=1 stride_w=1 dilation_h=1 dilation_w=1 pad_top=0 pad_left=0 pad_bottom=0 pad_right=0 groups=1 in_dtype=FP32 accumulate=False pad_value=0
33  TENSOR    SIGNAL     engine_id=TENSOR sem=8
34  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=9
35  DMA_LOAD  DMA_LOAD   tensor=e0_bias dram_offset=0 sram_addr=0x002000 dtype=FP32 shape=(1,1,16) dram_strides=(0,0,1) sram_strides=(0,0,1)
36  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=2
37  VECTOR    WAIT       engine_id=VECTOR sem=2
38  VECTOR    WAIT       engine_id=VECTOR sem=8
39  VECTOR    VBIAS_ADD  shape=(8,2,16) dst_addr=0x001400 dst_strides=(1,8,16) src_addr=0x001000 src_strides=(1,8,16) bias_addr=0x002040 axis=2 dtype=FP32
40  VECTOR    SIGNAL     engine_id=VECTOR sem=11
41  VECTOR    SIGNAL     engine_id=VECTOR sem=9
42  VECTOR    VRELU      shape=(8,2,16) dst_addr=0x001c00 dst_strides=(1,8,16) src_addr=0x001400 src_strides=(1,8,16) dtype=FP32
43  VECTOR    SIGNAL     engine_id=VECTOR sem=10
44  DMA_STORE WAIT       engine_id=DMA_STORE sem=10
45  DMA_STORE DMA_STORE  tensor=y dram_offset=0 sram_addr=0x001800 dtype=FP32 shape=(1,16,16) dram_strides=(0,64,1) sram_strides=(0,16,1)
46  DMA_STORE SIGNAL     engine_id=DMA_STORE sem=5
47  TENSOR    WAIT       engine_id=TENSOR sem=1
48  TENSOR    WAIT       engine_id=TENSOR sem=11
49  TENSOR    CONV       in_addr=0x000800 in_strides=(16,8,1) in_c=16 in_h=2 in_w=8 w_addr=0x000000 w_strides=(16,1,1,1) out_addr=0x001000 out_strides=(16,8,1) out_c=16 out_h=2 out_w=8 kernel_h=1 kernel_w=1 stride_h=1 stride_w=1 dilation_h=1 dilation_w=1 pad_top=0 pad_left=0 pad_bottom=0 pad_right=0 groups=1 in_dtype=FP32 accumulate=False pad_value=0
50  TENSOR    SIGNAL     engine_id=TENSOR sem=8
51  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=9
52  DMA_LOAD  DMA_LOAD   tensor=e0_bias dram_offset=0 sram_addr=0x002040 dtype=FP32 shape=(1,1,16) dram_strides=(0,0,1) sram_strides=(0,0,1)
53  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=2
54  VECTOR    WAIT       engine_id=VECTOR sem=2
55  VECTOR    WAIT       engine_id=VECTOR sem=8
56  VECTOR    VBIAS_ADD  shape=(8,2,16) dst_addr=0x001400 dst_strides=(1,8,16) src_addr=0x000c00 src_strides=(1,8,16) bias_addr=0x002000 axis=2 dtype=FP32
57  VECTOR    WAIT       engine_id=VECTOR sem=5
58  VECTOR    VRELU      shape=(8,2,16) dst_addr=0x001800 dst_strides=(1,8,16) src_addr=0x001400 src_strides=(1,8,16) dtype=FP32
59  VECTOR    SIGNAL     engine_id=VECTOR sem=10
60  DMA_STORE WAIT       engine_id=DMA_STORE sem=10
61  DMA_STORE DMA_STORE  tensor=y dram_offset=16 sram_addr=0x001c00 dtype=FP32 shape=(1,16,16) dram_strides=(0,64,1) sram_strides=(0,16,1)
62  DMA_STORE SIGNAL     engine_id=DMA_STORE sem=5
63  VECTOR    WAIT       engine_id=VECTOR sem=2
64  VECTOR    WAIT       engine_id=VECTOR sem=8
65  VECTOR    VBIAS_ADD  shape=(8,2,16) dst_addr=0x001400 dst_strides=(1,8,16) src_addr=0x001000 src_strides=(1,8,16) bias_addr=0x002040 axis=2 dtype=FP32
66  VECTOR    WAIT       engine_id=VECTOR sem=5
67  VECTOR    VRELU      shape=(8,2,16) dst_addr=0x001c00 dst_strides=(1,8,16) src_addr=0x001400 src_strides=(1,8,16) dtype=FP32
68  VECTOR    SIGNAL     engine_id=VECTOR sem=10
69  DMA_STORE WAIT       engine_id=DMA_STORE sem=10
70  DMA_STORE DMA_STORE  tensor=y dram_offset=32 sram_addr=0x001800 dtype=FP32 shape=(1,16,16) dram_strides=(0,64,1) sram_strides=(0,16,1)
71  DMA_STORE WAIT       engine_id=DMA_STORE sem=10
72  DMA_STORE DMA_STORE  tensor=y dram_offset=48 sram_addr=0x001c00 dtype=FP32 shape=(1,16,16) dram_strides=(0,64,1) sram_strides=(0,16,1)
73  -         END
