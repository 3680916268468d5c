package config

// check reports what is wrong with the nomad block and parses purge_after. Its
// address is checked with the warm pools that depend on it (checkWarmTransport).
func (n *Nomad) check(ck *checker) {
	ck.durs(durSetting{&n.PurgeAfterD, n.PurgeAfter, n.PurgeRange, "purge_after"})
}
