// Command failover prints the failover timeline of caphost serve under
// steady rate-limit traffic, as issue 15's table does: for a Sentinel
// deployment (1 primary, 2 replicas, 3 Sentinels, quorum 2) and a Cluster
// (3 primaries + 3 replicas, cluster-node-timeout 1 s) it starts private
// redis-server processes (internal/redistest, free loopback ports), runs
// the built caphost binary against them with one fail-closed fixed-window
// policy, drives 4 keep-alive clients at about 200 decisions/s over 20
// subjects, kills the primary with SIGKILL and prints, relative to the
// kill: Redis's own recovery (+switch-master, or a replica answering ROLE
// master), when caphost evaluates every call again, when /readyz is 200
// again and whether it flapped, and the fail-closed over-admission
// (decisions allowed beyond the limit, per subject and window).
//
//	make build && cd bench && go run ./cmd/failover -bin ../build/caphost -runs 3
//
// or `make bench-failover`. Figures on a loaded machine are indicative.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	os.Exit(mainErr(os.Args[1:], os.Stdout, os.Stderr))
}

func mainErr(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("failover", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		s       settings
		topos   string
		runs    int
		verbose bool
	)
	fs.StringVar(&s.bin, "bin", "../build/caphost", "the caphost binary (make build)")
	fs.StringVar(&topos, "topology", "sentinel,cluster", "comma-separated: sentinel, cluster")
	fs.IntVar(&runs, "runs", 3, "runs per topology")
	fs.IntVar(&s.clients, "clients", 4, "keep-alive HTTP clients")
	fs.IntVar(&s.rate, "rate", 200, "decisions per second, all clients together")
	fs.IntVar(&s.subjects, "subjects", 20, "distinct api-key subjects")
	fs.IntVar(&s.limit, "limit", 100, "the fail-closed policy's limit per subject and hour")
	fs.DurationVar(&s.warmup, "warmup", 5*time.Second, "traffic before the kill")
	fs.DurationVar(&s.steady, "steady", 8*time.Second, "traffic after recovery, to see /readyz stay put")
	fs.DurationVar(&s.deadline, "deadline", 90*time.Second, "give up this long after the kill")
	fs.BoolVar(&verbose, "v", false, "print the Redis harness's log lines")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	switch {
	case runs < 1 || s.clients < 1 || s.subjects < 1 || s.limit < 1 || s.rate < s.clients:
		fmt.Fprintln(stderr, "failover: -runs, -clients, -subjects and -limit must be ≥ 1 and -rate ≥ -clients")
		return 2
	}
	if _, err := os.Stat(s.bin); err != nil {
		fmt.Fprintf(stderr, "failover: caphost binary: %v (build it with `make build`)\n", err)
		return 2
	}
	s.verbose = io.Discard
	if verbose {
		s.verbose = stderr
	}
	starts := map[string]func(*harness) topology{"sentinel": startSentinel, "cluster": startCluster}
	var order []string
	for _, name := range strings.Split(topos, ",") {
		if starts[name] == nil {
			fmt.Fprintf(stderr, "failover: unknown topology %q\n", name)
			return 2
		}
		order = append(order, name)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	fmt.Fprintf(stdout, "caphost failover timeline: %d clients, %d decisions/s over %d subjects, fail-closed fixed window %d/h; offsets from kill -9 of the primary\n",
		s.clients, s.rate, s.subjects, s.limit)
	results := map[string][]timeline{}
	for _, name := range order {
		for i := 1; i <= runs; i++ {
			tl, err := run(ctx, s, starts[name])
			if err != nil {
				fmt.Fprintf(stderr, "failover: %s run %d: %v\n", name, i, err)
				return 1
			}
			results[name] = append(results[name], tl)
			fmt.Fprintf(stdout, "%-8s run %d: %s\n", name, i, tl)
		}
	}
	fmt.Fprintln(stdout)
	printTable(stdout, order, results)
	return 0
}

func (tl timeline) String() string {
	down := "never"
	if tl.down >= 0 {
		down = offset(tl.down)
	}
	return fmt.Sprintf("redis recovered %s; first failed call %s, caphost evaluates every call again %s (%d of %d calls failed); "+
		"/readyz down %s, 200 again %s, %d up-transitions, %d ready probes while calls failed; over-admission %d",
		offset(tl.recovery), offsetOrNone(tl.firstFail, tl.failed), offsetOrNone(tl.evaluates, tl.failed),
		tl.failed, tl.calls, down, offsetOrNone(tl.ready, tl.upTransitions), tl.upTransitions, tl.readyWhileFailing, tl.overAdmitted)
}

func offset(d time.Duration) string { return "+" + d.Round(time.Millisecond).String() }

func offsetOrNone(d time.Duration, n int) string {
	if n == 0 {
		return "-"
	}
	return offset(d)
}

// printTable prints the table: one row per milestone, one column
// per topology, every run's figure.
func printTable(w io.Writer, order []string, results map[string][]timeline) {
	row := func(label string, f func(timeline) string) {
		cells := []string{label}
		for _, name := range order {
			var vals []string
			for _, tl := range results[name] {
				vals = append(vals, f(tl))
			}
			cells = append(cells, strings.Join(vals, " / "))
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	header := []string{""}
	sep := []string{"---"}
	for _, name := range order {
		header = append(header, name)
		sep = append(sep, "---")
	}
	fmt.Fprintf(w, "| %s |\n| %s |\n", strings.Join(header, " | "), strings.Join(sep, " | "))
	row("Redis itself (switch-master / replica promoted)", func(tl timeline) string { return offset(tl.recovery) })
	row("caphost evaluates every call again", func(tl timeline) string { return offsetOrNone(tl.evaluates, tl.failed) })
	row("… after Redis recovered", func(tl timeline) string {
		if tl.failed == 0 {
			return "-"
		}
		return (tl.evaluates - tl.recovery).Round(time.Millisecond).String()
	})
	row("failed calls", func(tl timeline) string { return fmt.Sprintf("%d/%d", tl.failed, tl.calls) })
	row("/readyz 200 again", func(tl timeline) string { return offsetOrNone(tl.ready, tl.upTransitions) })
	row("/readyz flapped (up-transitions)", func(tl timeline) string {
		return fmt.Sprintf("%t (%d)", tl.flapped(), tl.upTransitions)
	})
	row("/readyz 200 while calls failed (probes)", func(tl timeline) string { return fmt.Sprint(tl.readyWhileFailing) })
	row("fail-closed over-admission", func(tl timeline) string { return fmt.Sprint(tl.overAdmitted) })
}
