package mediajobs

// Destinations are where a job's outputs also go (output_destinations): per
// output, a presigned PUT URL the user controls (docs/api.md#output-destinations).
// A URL is a credential: they are stored under a key of their own
// (store.Destinations), never in the job record, the dispatch payload or a log;
// the runner asks the gateway for them at upload time.
type Destinations struct {
	URLs map[string]string `json:"urls"` // output name → URL
	// KeepOutputs: the service keeps its own copy too (keep_outputs, default true).
	KeepOutputs bool `json:"keep_outputs"`
}

const (
	// MaxDestinations bounds a job's output_destinations, MaxDestinationsBytes
	// their names and URLs together, as stored (each URL is within MaxURLBytes).
	MaxDestinations      = 20
	MaxDestinationsBytes = 32 << 10
	// MaxShownURLBytes bounds a destination's URL as the job record keeps it
	// (Delivery.URL: scheme, host and path).
	MaxShownURLBytes = 256
)

// Delivery is what became of an output sent to its destination; a destination
// that refused the upload failed the job instead.
type Delivery struct {
	URL        string `json:"url"`    // scheme, host and path: never the query, which holds the signature
	Status     string `json:"status"` // "uploaded"
	HTTPStatus int    `json:"http_status"`
	SHA256     string `json:"sha256"` // hex, of the bytes sent
	// Kept: the service kept its own copy too, linked in output_files.
	Kept bool `json:"kept"`
}

// Stored reports whether the service holds a copy of o (output_files links it):
// all outputs but those sent to a destination of a job with keep_outputs false.
func (o Output) Stored() bool { return o.Destination == nil || o.Destination.Kept }

// SentOnlyBytes is the size of the outputs the service does not hold (sent to
// a destination only, keep_outputs false): they count against no storage.
func SentOnlyBytes(outs []Output) int64 {
	var n int64
	for _, o := range outs {
		if !o.Stored() {
			n += max(o.Size, 0)
		}
	}
	return n
}

// SingleFile reports whether the output name stands for one file: no counter
// (frame_%04d.png) and no %v. Only such an output may have a destination.
func SingleFile(name string) bool {
	return !counterRe.MatchString(name) && !variantRe.MatchString(name)
}

// boundDeliveries keeps the deliveries of at most MaxDestinations outputs, their
// texts clipped, for the job record (BoundResult).
func boundDeliveries(outs []Output) {
	n := 0
	for i := range outs {
		d := outs[i].Destination
		if d == nil {
			continue
		}
		if n++; n > MaxDestinations {
			outs[i].Destination = nil
			continue
		}
		c := *d
		c.URL, c.Status, c.SHA256 = cut(c.URL, MaxShownURLBytes), cut(c.Status, 16), cut(c.SHA256, 64)
		outs[i].Destination = &c
	}
}
