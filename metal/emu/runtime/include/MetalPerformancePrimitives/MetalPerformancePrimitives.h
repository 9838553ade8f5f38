// Emulator shim: the tensor-op surface is msl_emu_tensor.h, which msl_emu.h includes when the
// generator saw this include (it defines MSL_EMU_METAL4 before the file's namespace opens).
#ifndef MSL_EMU_METAL4
#error "metal/emu: include <metal_tensor> or <MetalPerformancePrimitives/MetalPerformancePrimitives.h> on a line of its own, so the generator sees it"
#endif
