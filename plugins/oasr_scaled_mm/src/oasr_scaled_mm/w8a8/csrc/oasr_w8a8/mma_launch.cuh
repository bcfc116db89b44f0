// oasr_w8a8: the launch and call of a W8A8 format's CUTLASS 2.x kernel type, written once.
//
// Included last inside a family's 2.x `struct Kernel`, after its Prepared (the kernel's Params)
// and prepare: the kit's 2.x launch of the prepared parameters, and the launcher body.
  static int32_t launch(Prepared& prep, CallArgs const& c, cudaStream_t stream) {
    return Launch::launch(prep.params, c.workspace, stream);
  }

  static int32_t run(Operands const& o, CallArgs const& c, cudaStream_t stream) {
    return run_call<Kernel>(o, c, stream);
  }
