package mediajobs

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// References between jobs (docs/references.md): an input job:<id>/<output>
// names an output of another job of the same account. The job waits, queued,
// until that job succeeds, then its runner fetches the output from storage like
// any input; if that job fails or is cancelled, so does the waiting job.

// ResolveRef says what a reference to output of job dep means now: the output's
// blob key once dep has succeeded with it; wait while dep may still make it;
// otherwise never says why it never will, for a person to act on.
func ResolveRef(dep *Job, output string) (key string, wait bool, never string) {
	switch dep.Status {
	case StatusSucceeded:
		for _, o := range dep.Outputs {
			if o.Name != output {
				continue
			}
			if o.Key == "" {
				return "", false, fmt.Sprintf("%s's output %q was not kept in this service's storage", jobName(dep), output)
			}
			return o.Key, false, ""
		}
		return "", false, fmt.Sprintf("%s succeeded without an output named %q (it made: %s)", jobName(dep), output, outputNames(dep))
	case StatusFailed:
		return "", false, fmt.Sprintf("%s failed, so its output %q will not exist: %s", jobName(dep), output, dep.ErrorMessage)
	case StatusCancelled:
		return "", false, fmt.Sprintf("%s was cancelled, so its output %q will not exist", jobName(dep), output)
	}
	if !mayMake(dep, output) {
		return "", false, fmt.Sprintf("job %s does not list %q among its output_files (%s), nor a pattern that makes it (a pattern's files are named as made: seg_%%03d.ts makes seg_001.ts)", dep.ID, output, strings.Join(dep.OutputNames, ", "))
	}
	return "", true, ""
}

// IntermediateRef says why a job outside dep's pipeline may not take dep's
// outputs, "" when it may: a step with "publish": false keeps its outputs for
// the pipeline's own steps only, and they are deleted when the pipeline ends
// (docs/pipelines.md#intermediate-outputs). References between the steps of
// the pipeline are planned with it and never checked here.
func IntermediateRef(dep *Job, output string) string {
	if !dep.IntermediateOutputs() {
		return ""
	}
	return fmt.Sprintf("%s's output %q is intermediate (its step has \"publish\": false): only the steps of pipeline %s take it, and it is deleted when that pipeline ends; publish the step's outputs to take them from outside it", jobName(dep), output, dep.Pipeline.ID)
}

// mayMake reports whether dep lists output, or a pattern (%03d, %v) that
// makes it: seg_%03d.ts makes seg_001.ts, not out.mp4 nor seg_%03d.ts itself
// (a file is published under the name it was made with).
func mayMake(dep *Job, output string) bool {
	return slices.ContainsFunc(dep.OutputNames, func(n string) bool {
		if !strings.Contains(n, "%") {
			return n == output
		}
		return !strings.Contains(output, "%") && OutputPattern(n).MatchString(output)
	})
}

func outputNames(j *Job) string {
	if len(j.Outputs) == 0 {
		return "nothing"
	}
	names := make([]string, len(j.Outputs))
	for i, o := range j.Outputs {
		names[i] = o.Name
	}
	return strings.Join(names, ", ")
}

// AwaitingDetail is the status_detail of a job that awaits other jobs'
// outputs: which jobs, and for which inputs.
func (j *Job) AwaitingDetail() string {
	var parts []string
	named := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(j.InputFiles)) {
		if id, output, ok := ParseJobRef(j.InputFiles[name]); ok && slices.Contains(j.Awaits, id) {
			parts = append(parts, "job "+id+" to make "+output+" (input "+name+")")
			named[id] = true
		}
	}
	for _, id := range j.Awaits {
		if !named[id] { // an order only (mj.ExtendChunked's max_workers)
			parts = append(parts, "job "+id+" to succeed")
		}
	}
	return "waiting for " + strings.Join(parts, ", ")
}

// jobName names dep in a message: "job <id>", with its pipeline step when it
// is one (docs/pipelines.md).
func jobName(dep *Job) string {
	if dep.Pipeline == nil {
		return "job " + dep.ID
	}
	step := dep.Pipeline.Step
	if dep.Pipeline.Item != nil {
		step += "[" + strconv.Itoa(*dep.Pipeline.Item) + "]"
	}
	return "job " + dep.ID + " (step " + step + ")"
}
