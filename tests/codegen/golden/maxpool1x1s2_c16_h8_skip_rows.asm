; config_hash 0x3af7dd832c2c74b7
; 2 tensors
;     0 x INPUT FP32 (1, 16, 8, 8)
;     1 y OUTPUT FP32 (1, 16, 4, 4)
; 15 instructions
 0  DMA_LOAD  DMA_LOAD   tensor=x dram_offset=0 sram_addr=0x000000 dtype=FP32 shape=(16,2,8) dram_strides=(64,16,1) sram_strides=(16,8,1)
 1  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=2
 2  DMA_LOAD  DMA_LOAD   tensor=x dram_offset=32 sram_addr=0x000400 dtype=FP32 shape=(16,2,8) dram_strides=(64,16,1) sram_strides=(16,8,1)
 3  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=2
 4  VECTOR    WAIT       engine_id=VECTOR sem=2
 5  VECTOR    VMAXPOOL   in_addr=0x000000 in_strides=(16,8,1) in_h=2 in_w=8 out_addr=0x000800 out_strides=(8,4,1) channels=16 out_h=2 out_w=4 kernel_h=1 kernel_w=1 stride_h=1 stride_w=2 pad_top=0 pad_left=0 pad_bottom=0 pad_right=0 dtype=FP32 count_include_pad=False
 6  VECTOR    SIGNAL     engine_id=VECTOR sem=10
 7  VECTOR    WAIT       engine_id=VECTOR sem=2
 8  VECTOR    VMAXPOOL   in_addr=0x000400 in_strides=(16,8,1) in_h=2 in_w=8 out_addr=0x000a00 out_strides=(8,4,1) channels=16 out_h=2 out_w=4 kernel_h=1 kernel_w=1 stride_h=1 stride_w=2 pad_top=0 pad_left=0 pad_bottom=0 pad_right=0 dtype=FP32 count_include_pad=False
 9  VECTOR    SIGNAL     engine_id=VECTOR sem=10
10  DMA_STORE WAIT       engine_id=DMA_STORE sem=10
11  DMA_STORE DMA_STORE  tensor=y dram_offset=0 sram_addr=0x000800 dtype=FP32 shape=(1,16,8) dram_strides=(0,16,1) sram_strides=(0,8,1)
12  DMA_STORE WAIT       engine_id=DMA_STORE sem=10
13  DMA_STORE DMA_STORE  tensor=y dram_offset=8 sram_addr=0x000a00 dtype=FP32 shape=(1,16,8) dram_strides=(0,16,1) sram_strides=(0,8,1)
14  -         END
