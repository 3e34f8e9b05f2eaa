; config_hash 0x3af7dd832c2c74b7
; 4 tensors
;     0 x INPUT FP32 (1, 16, 8, 8)
;     1 w INPUT FP32 (16, 16, 3, 3)
;     2 e0_bias INPUT FP32 (16,)
;     3 y OUTPUT FP32 (1, 16, 8, 8)
; 45 instructions
 0  DMA_LOAD  DMA_LOAD   tensor=x dram_offset=0 sram_addr=0x00002c dtype=FP32 shape=(16,5,8) dram_strides=(64,8,1) sram_strides=(60,10,1)
 1  DMA_LOAD  DMA_LOAD   tensor=w dram_offset=0 sram_addr=0x001700 dtype=FP32 shape=(1,1,2304) dram_strides=(0,0,1) sram_strides=(0,0,1)
 2  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
 3  TENSOR    WAIT       engine_id=TENSOR sem=1
 4  TENSOR    CONV       in_addr=0x00002c in_strides=(60,10,1) in_c=16 in_h=5 in_w=8 w_addr=0x001700 w_strides=(144,9,3,1) out_addr=0x000f00 out_strides=(32,8,1) out_c=16 out_h=4 out_w=8 kernel_h=3 kernel_w=3 stride_h=1 stride_w=1 dilation_h=1 dilation_w=1 pad_top=1 pad_left=1 pad_bottom=0 pad_right=1 groups=1 in_dtype=FP32 accumulate=False pad_value=0
 5  TENSOR    SIGNAL     engine_id=TENSOR sem=8
 6  TENSOR    SIGNAL     engine_id=TENSOR sem=7
 7  TENSOR    SIGNAL     engine_id=TENSOR sem=6
 8  DMA_LOAD  DMA_LOAD   tensor=e0_bias dram_offset=0 sram_addr=0x003b00 dtype=FP32 shape=(1,1,16) dram_strides=(0,0,1) sram_strides=(0,0,1)
 9  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=2
10  VECTOR    WAIT       engine_id=VECTOR sem=2
11  VECTOR    WAIT       engine_id=VECTOR sem=8
12  VECTOR    VBIAS_ADD  shape=(8,4,16) dst_addr=0x000f00 dst_strides=(1,8,32) src_addr=0x000f00 src_strides=(1,8,32) bias_addr=0x003b00 axis=2 dtype=FP32
13  VECTOR    SIGNAL     engine_id=VECTOR sem=9
14  VECTOR    VRELU      shape=(8,4,16) dst_addr=0x000f00 dst_strides=(1,8,32) src_addr=0x000f00 src_strides=(1,8,32) dtype=FP32
15  VECTOR    SIGNAL     engine_id=VECTOR sem=10
16  VECTOR    SIGNAL     engine_id=VECTOR sem=11
17  DMA_STORE WAIT       engine_id=DMA_STORE sem=7
18  DMA_STORE WAIT       engine_id=DMA_STORE sem=10
19  DMA_STORE DMA_STORE  tensor=y dram_offset=0 sram_addr=0x000f00 dtype=FP32 shape=(1,16,32) dram_strides=(0,64,1) sram_strides=(0,32,1)
20  DMA_STORE SIGNAL     engine_id=DMA_STORE sem=4
21  DMA_STORE SIGNAL     engine_id=DMA_STORE sem=5
22  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=6
23  DMA_LOAD  DMA_LOAD   tensor=x dram_offset=24 sram_addr=0x000004 dtype=FP32 shape=(16,5,8) dram_strides=(64,8,1) sram_strides=(60,10,1)
24  DMA_LOAD  DMA_LOAD   tensor=w dram_offset=0 sram_addr=0x001700 dtype=FP32 shape=(1,1,2304) dram_strides=(0,0,1) sram_strides=(0,0,1)
25  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
26  TENSOR    WAIT       engine_id=TENSOR sem=1
27  TENSOR    WAIT       engine_id=TENSOR sem=4
28  TENSOR    WAIT       engine_id=TENSOR sem=11
29  TENSOR    CONV       in_addr=0x000004 in_strides=(60,10,1) in_c=16 in_h=5 in_w=8 w_addr=0x001700 w_strides=(144,9,3,1) out_addr=0x000f00 out_strides=(32,8,1) out_c=16 out_h=4 out_w=8 kernel_h=3 kernel_w=3 stride_h=1 stride_w=1 dilation_h=1 dilation_w=1 pad_top=0 pad_left=1 pad_bottom=1 pad_right=1 groups=1 in_dtype=FP32 accumulate=False pad_value=0
30  TENSOR    SIGNAL     engine_id=TENSOR sem=8
31  TENSOR    SIGNAL     engine_id=TENSOR sem=7
32  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=9
33  DMA_LOAD  DMA_LOAD   tensor=e0_bias dram_offset=0 sram_addr=0x003b00 dtype=FP32 shape=(1,1,16) dram_strides=(0,0,1) sram_strides=(0,0,1)
34  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=2
35  VECTOR    WAIT       engine_id=VECTOR sem=2
36  VECTOR    WAIT       engine_id=VECTOR sem=5
37  VECTOR    WAIT       engine_id=VECTOR sem=8
38  VECTOR    VBIAS_ADD  shape=(8,4,16) dst_addr=0x000f00 dst_strides=(1,8,32) src_addr=0x000f00 src_strides=(1,8,32) bias_addr=0x003b00 axis=2 dtype=FP32
39  VECTOR    VRELU      shape=(8,4,16) dst_addr=0x000f00 dst_strides=(1,8,32) src_addr=0x000f00 src_strides=(1,8,32) dtype=FP32
40  VECTOR    SIGNAL     engine_id=VECTOR sem=10
41  DMA_STORE WAIT       engine_id=DMA_STORE sem=7
42  DMA_STORE WAIT       engine_id=DMA_STORE sem=10
43  DMA_STORE DMA_STORE  tensor=y dram_offset=32 sram_addr=0x000f00 dtype=FP32 shape=(1,16,32) dram_strides=(0,64,1) sram_strides=(0,32,1)
44  -         END
