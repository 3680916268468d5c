package mediajobs

// Version is this build's version: "dev" unless the build sets it with
// -ldflags "-X github.com/mediajobs/mediajobs.Version=1.2.3" (make build does, from
// git describe). It is in the webhook User-Agent and in mediajobs_build_info.
var Version = "dev"
