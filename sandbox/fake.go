package sandbox

// FakeGPUNodes is for other packages' tests: the GPU device nodes are those
// glob matches (not /dev/nvidia*), and each copy of a node fails with
// mknodErr when it is not nil. restore undoes both.
func FakeGPUNodes(glob string, mknodErr error) (restore func()) {
	oldGlob, oldMknod := gpuDevices, mknod
	gpuDevices = glob
	if mknodErr != nil {
		mknod = func(string, uint32, int) error { return mknodErr }
	}
	return func() { gpuDevices, mknod = oldGlob, oldMknod }
}
