; config_hash 0x3af7dd832c2c74b7
; 3 tensors
;     0 x INPUT FP32 (1, 8, 4, 4)
;     1 w INPUT FP32 (16, 8, 1, 1)
;     2 y OUTPUT FP32 (1, 4, 4, 16)
; 16 instructions
 0  DMA_LOAD  DMA_LOAD   tensor=w dram_offset=0 sram_addr=0x000000 dtype=FP32 shape=(1,1,128) dram_strides=(0,0,1) sram_strides=(0,0,1)
 1  DMA_LOAD  DMA_LOAD   tensor=x dram_offset=0 sram_addr=0x000200 dtype=FP32 shape=(1,8,8) dram_strides=(0,16,1) sram_strides=(0,1,8)
 2  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
 3  DMA_LOAD  DMA_LOAD   tensor=x dram_offset=8 sram_addr=0x000300 dtype=FP32 shape=(1,8,8) dram_strides=(0,16,1) sram_strides=(0,1,8)
 4  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
 5  TENSOR    WAIT       engine_id=TENSOR sem=1
 6  TENSOR    CONV       in_addr=0x000200 in_strides=(1,32,8) in_c=8 in_h=2 in_w=4 w_addr=0x000000 w_strides=(8,1,1,1) out_addr=0x000400 out_strides=(1,64,16) out_c=16 out_h=2 out_w=4 kernel_h=1 kernel_w=1 stride_h=1 stride_w=1 dilation_h=1 dilation_w=1 pad_top=0 pad_left=0 pad_bottom=0 pad_right=0 groups=1 in_dtype=FP32 accumulate=False pad_value=0
 7  TENSOR    SIGNAL     engine_id=TENSOR sem=7
 8  TENSOR    WAIT       engine_id=TENSOR sem=1
 9  TENSOR    CONV       in_addr=0x000300 in_strides=(1,32,8) in_c=8 in_h=2 in_w=4 w_addr=0x000000 w_strides=(8,1,1,1) out_addr=0x000600 out_strides=(1,64,16) out_c=16 out_h=2 out_w=4 kernel_h=1 kernel_w=1 stride_h=1 stride_w=1 dilation_h=1 dilation_w=1 pad_top=0 pad_left=0 pad_bottom=0 pad_right=0 groups=1 in_dtype=FP32 accumulate=False pad_value=0
10  TENSOR    SIGNAL     engine_id=TENSOR sem=7
11  DMA_STORE WAIT       engine_id=DMA_STORE sem=7
12  DMA_STORE DMA_STORE  tensor=y dram_offset=0 sram_addr=0x000400 dtype=FP32 shape=(1,1,128) dram_strides=(0,0,1) sram_strides=(0,0,1)
13  DMA_STORE WAIT       engine_id=DMA_STORE sem=7
14  DMA_STORE DMA_STORE  tensor=y dram_offset=128 sram_addr=0x000600 dtype=FP32 shape=(1,1,128) dram_strides=(0,0,1) sram_strides=(0,0,1)
15  -         END
