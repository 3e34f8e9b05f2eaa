; config_hash 0x3af7dd832c2c74b7
; 2 tensors
;     0 x INPUT FP32 (1, 16, 9, 9)
;     1 y OUTPUT FP32 (1, 16, 5, 5)
; 59 instructions
 0  DMA_LOAD  DMA_LOAD   tensor=x dram_offset=0 sram_addr=0x000028 dtype=FP32 shape=(16,4,8) dram_strides=(81,9,1) sram_strides=(45,9,1)
 1  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=2
 2  DMA_LOAD  DMA_LOAD   tensor=x dram_offset=7 sram_addr=0x000b64 dtype=FP32 shape=(16,4,2) dram_strides=(81,9,1) sram_strides=(45,9,1)
 3  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=2
 4  VECTOR    WAIT       engine_id=VECTOR sem=2
 5  VECTOR    VMAXPOOL   in_addr=0x000028 in_strides=(45,9,1) in_h=4 in_w=8 out_addr=0x001680 out_strides=(8,4,1) channels=16 out_h=2 out_w=4 kernel_h=3 kernel_w=3 stride_h=2 stride_w=2 pad_top=1 pad_left=1 pad_bottom=0 pad_right=0 dtype=FP32 count_include_pad=False
 6  VECTOR    SIGNAL     engine_id=VECTOR sem=9
 7  VECTOR    SIGNAL     engine_id=VECTOR sem=10
 8  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=9
 9  DMA_LOAD  DMA_LOAD   tensor=x dram_offset=27 sram_addr=0x000004 dtype=FP32 shape=(16,5,8) dram_strides=(81,9,1) sram_strides=(45,9,1)
10  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=2
11  VECTOR    WAIT       engine_id=VECTOR sem=2
12  VECTOR    VMAXPOOL   in_addr=0x000b64 in_strides=(45,9,1) in_h=4 in_w=2 out_addr=0x001880 out_strides=(8,4,1) channels=16 out_h=2 out_w=1 kernel_h=3 kernel_w=3 stride_h=2 stride_w=2 pad_top=1 pad_left=0 pad_bottom=0 pad_right=1 dtype=FP32 count_include_pad=False
13  VECTOR    SIGNAL     engine_id=VECTOR sem=9
14  VECTOR    SIGNAL     engine_id=VECTOR sem=10
15  DMA_STORE WAIT       engine_id=DMA_STORE sem=10
16  DMA_STORE DMA_STORE  tensor=y dram_offset=0 sram_addr=0x001680 dtype=FP32 shape=(16,2,4) dram_strides=(25,5,1) sram_strides=(8,4,1)
17  DMA_STORE SIGNAL     engine_id=DMA_STORE sem=5
18  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=9
19  DMA_LOAD  DMA_LOAD   tensor=x dram_offset=34 sram_addr=0x000b40 dtype=FP32 shape=(16,5,2) dram_strides=(81,9,1) sram_strides=(45,9,1)
20  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=2
21  VECTOR    WAIT       engine_id=VECTOR sem=2
22  VECTOR    WAIT       engine_id=VECTOR sem=5
23  VECTOR    VMAXPOOL   in_addr=0x000004 in_strides=(45,9,1) in_h=5 in_w=8 out_addr=0x001680 out_strides=(8,4,1) channels=16 out_h=2 out_w=4 kernel_h=3 kernel_w=3 stride_h=2 stride_w=2 pad_top=0 pad_left=1 pad_bottom=0 pad_right=0 dtype=FP32 count_include_pad=False
24  VECTOR    SIGNAL     engine_id=VECTOR sem=9
25  VECTOR    SIGNAL     engine_id=VECTOR sem=10
26  DMA_STORE WAIT       engine_id=DMA_STORE sem=10
27  DMA_STORE DMA_STORE  tensor=y dram_offset=4 sram_addr=0x001880 dtype=FP32 shape=(1,16,2) dram_strides=(0,25,5) sram_strides=(0,8,4)
28  DMA_STORE SIGNAL     engine_id=DMA_STORE sem=5
29  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=9
30  DMA_LOAD  DMA_LOAD   tensor=x dram_offset=63 sram_addr=0x000004 dtype=FP32 shape=(16,2,8) dram_strides=(81,9,1) sram_strides=(45,9,1)
31  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=2
32  VECTOR    WAIT       engine_id=VECTOR sem=2
33  VECTOR    WAIT       engine_id=VECTOR sem=5
34  VECTOR    VMAXPOOL   in_addr=0x000b40 in_strides=(45,9,1) in_h=5 in_w=2 out_addr=0x001880 out_strides=(8,4,1) channels=16 out_h=2 out_w=1 kernel_h=3 kernel_w=3 stride_h=2 stride_w=2 pad_top=0 pad_left=0 pad_bottom=0 pad_right=1 dtype=FP32 count_include_pad=False
35  VECTOR    SIGNAL     engine_id=VECTOR sem=9
36  VECTOR    SIGNAL     engine_id=VECTOR sem=10
37  DMA_STORE WAIT       engine_id=DMA_STORE sem=10
38  DMA_STORE DMA_STORE  tensor=y dram_offset=10 sram_addr=0x001680 dtype=FP32 shape=(16,2,4) dram_strides=(25,5,1) sram_strides=(8,4,1)
39  DMA_STORE SIGNAL     engine_id=DMA_STORE sem=5
40  DMA_LOAD  WAIT       engine_id=DMA_LOAD sem=9
41  DMA_LOAD  DMA_LOAD   tensor=x dram_offset=70 sram_addr=0x000b40 dtype=FP32 shape=(16,2,2) dram_strides=(81,9,1) sram_strides=(45,9,1)
42  DMA_LOAD  SIGNAL     engine_id=DMA_LOAD sem=2
43  VECTOR    WAIT       engine_id=VECTOR sem=2
44  VECTOR    WAIT       engine_id=VECTOR sem=5
45  VECTOR    VMAXPOOL   in_addr=0x000004 in_strides=(45,9,1) in_h=2 in_w=8 out_addr=0x001680 out_strides=(8,4,1) channels=16 out_h=1 out_w=4 kernel_h=3 kernel_w=3 stride_h=2 stride_w=2 pad_top=0 pad_left=1 pad_bottom=1 pad_right=0 dtype=FP32 count_include_pad=False
46  VECTOR    SIGNAL     engine_id=VECTOR sem=10
47  DMA_STORE WAIT       engine_id=DMA_STORE sem=10
48  DMA_STORE DMA_STORE  tensor=y dram_offset=14 sram_addr=0x001880 dtype=FP32 shape=(1,16,2) dram_strides=(0,25,5) sram_strides=(0,8,4)
49  DMA_STORE SIGNAL     engine_id=DMA_STORE sem=5
50  VECTOR    WAIT       engine_id=VECTOR sem=2
51  VECTOR    WAIT       engine_id=VECTOR sem=5
52  VECTOR    VMAXPOOL   in_addr=0x000b40 in_strides=(45,9,1) in_h=2 in_w=2 out_addr=0x001880 out_strides=(8,4,1) channels=16 out_h=1 out_w=1 kernel_h=3 kernel_w=3 stride_h=2 stride_w=2 pad_top=0 pad_left=0 pad_bottom=1 pad_right=1 dtype=FP32 count_include_pad=False
53  VECTOR    SIGNAL     engine_id=VECTOR sem=10
54  DMA_STORE WAIT       engine_id=DMA_STORE sem=10
55  DMA_STORE DMA_STORE  tensor=y dram_offset=20 sram_addr=0x001680 dtype=FP32 shape=(1,16,4) dram_strides=(0,25,1) sram_strides=(0,8,1)
56  DMA_STORE WAIT       engine_id=DMA_STORE sem=10
57  DMA_STORE DMA_STORE  tensor=y dram_offset=24 sram_addr=0x001880 dtype=FP32 shape=(1,1,16) dram_strides=(0,0,25) sram_strides=(0,0,8)
58  -         END
