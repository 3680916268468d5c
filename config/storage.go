package config

import (
	"fmt"
	"net/url"
	"strings"
)

// check reports what is wrong with the storage block and parses its durations.
func (st *Storage) check(ck *checker) {
	if st.Type != "local" {
		ck.bad(st.TypeRange, "Unsupported storage type", fmt.Sprintf("storage type %q is not supported; set url instead (file:///dir or s3://bucket?...).", st.Type))
	}
	if st.URL != "" {
		if msg := storageURLProblem(st.URL); msg != "" {
			ck.bad(st.URLRange, "Invalid storage url", msg)
		}
	} else if st.Path == "" {
		rng := st.PathRange
		if rng.Filename == "" {
			rng = st.DefRange
		}
		ck.bad(rng, "Missing storage", "storage needs url (file:///dir or s3://bucket?...) or path (a local directory).")
	}
	ck.durs(
		durSetting{&st.TTL, st.DownloadURLTTL, st.TTLRange, "download_url_ttl"},
		durSetting{&st.Retention, st.OutputRetention, st.RetentionRange, "output_retention"},
		durSetting{&st.Sweep, st.SweepEvery, st.SweepRange, "sweep_every"},
		durSetting{&st.JobRetentionD, st.JobRetention, st.JobRetRange, "job_retention"},
	)
	if st.JobRetentionD > 0 && st.JobRetentionD < st.Retention {
		ck.bad(st.JobRetRange, "Invalid job_retention", fmt.Sprintf("job_retention = %q is shorter than output_retention = %q: a job must outlive its output files, or their links would point at a deleted job's files.", st.JobRetention, st.OutputRetention))
	}
}

// storageURLProblem says what is wrong with a storage url, or "".
func storageURLProblem(raw string) string {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Sprintf("url is not a URL: %v.", err)
	case u.Scheme == "file" && (u.Host != "" || !strings.HasPrefix(u.Path, "/")):
		return "a file url names an absolute directory: file:///var/lib/mediajobs/blobs (three slashes)."
	case u.Scheme == "s3" && u.Host == "":
		return "an s3 url names its bucket: s3://BUCKET?region=us-east-1 (and, for MinIO or another S3-compatible store, &endpoint=http://host:9000&use_path_style=true)."
	case u.Scheme != "file" && u.Scheme != "s3":
		return fmt.Sprintf("storage scheme %q is not supported; use file:///dir or s3://bucket?....", u.Scheme)
	case u.User != nil:
		return "put no credentials in the url: the s3 driver reads AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or a profile, or an instance role)."
	}
	return ""
}
