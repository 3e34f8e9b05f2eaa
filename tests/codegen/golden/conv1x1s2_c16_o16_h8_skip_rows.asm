; config_hash 0x3af7dd832c2c74b7
; 3 tensors
;     0 x INPUT FP32 (1, 16, 8, 8)
;     1 w INPUT FP32 (16, 16, 1, 1)
;     2 y OUTPUT FP32 (1, 16, 4, 4)
; 16 instructions
 0  DMA_LOAD  DMA_LOAD   tensor=w dram_offset=0 sram_addr=0x000000 dtype=FP32 shape=(1,1,256) dram_strides=(0,0,1) sram_strides=(0,0,1)
 1  DMA_LOAD  DMA_LOAD   tensor=x dram_offset=0 sram_addr=0x000400 dtype=FP32 shape=(16,2,7) dram_strides=(64,16,1) sram_strides=(14,7,1)
 2  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
 3  DMA_LOAD  DMA_LOAD   tensor=x dram_offset=32 sram_addr=0x000780 dtype=FP32 shape=(16,2,7) dram_strides=(64,16,1) sram_strides=(14,7,1)
 4  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=1
 5  TENSOR    WAIT       engine_id=TENSOR sem=1
 6  TENSOR    CONV       in_addr=0x000400 in_strides=(14,7,1) in_c=16 in_h=2 in_w=7 w_addr=0x000000 w_strides=(16,1,1,1) out_addr=0x000b00 out_strides=(8,4,1) out_c=16 out_h=2 out_w=4 kernel_h=1 kernel_w=1 stride_h=1 stride_w=2 dilation_h=1 dilation_w=1 pad_top=0 pad_left=0 pad_bottom=0 pad_right=0 groups=1 in_dtype=FP32 accumulate=False pad_value=0
 7  TENSOR    SIGNAL     engine_id=TENSOR sem=7
 8  TENSOR    WAIT       engine_id=TENSOR sem=1
 9  TENSOR    CONV       in_addr=0x000780 in_strides=(14,7,1) in_c=16 in_h=2 in_w=7 w_addr=0x000000 w_strides=(16,1,1,1) out_addr=0x000d00 out_strides=(8,4,1) out_c=16 out_h=2 out_w=4 kernel_h=1 kernel_w=1 stride_h=1 stride_w=2 dilation_h=1 dilation_w=1 pad_top=0 pad_left=0 pad_bottom=0 pad_right=0 groups=1 in_dtype=FP32 accumulate=False pad_value=0
10  TENSOR    SIGNAL     engine_id=TENSOR sem=7
11  DMA_STORE WAIT       engine_id=DMA_STORE sem=7
12  DMA_STORE DMA_STORE  tensor=y dram_offset=0 sram_addr=0x000b00 dtype=FP32 shape=(1,16,8) dram_strides=(0,16,1) sram_strides=(0,8,1)
13  DMA_STORE WAIT       engine_id=DMA_STORE sem=7
14  DMA_STORE DMA_STORE  tensor=y dram_offset=8 sram_addr=0x000d00 dtype=FP32 shape=(1,16,8) dram_strides=(0,16,1) sram_strides=(0,8,1)
15  -         END
