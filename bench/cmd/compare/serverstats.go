package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// printServerStats runs each contender alone for dur with goroutines
// workers and prints what it cost redis-server per op: the server's CPU
// (user+system, all threads, from INFO cpu) and the per-command times of
// INFO commandstats, which count commands run inside a script too (their
// time is also inside the script's). Interleaved rows cannot tell the
// contenders apart on the server; this can, because only one runs at a time.
// plain is an unguarded client on the private server (CONFIG RESETSTAT).
func printServerStats(ctx context.Context, plain *redis.Client, cs []contender, goroutines int, dur time.Duration) {
	for _, c := range cs {
		measure(ctx, c, goroutines, dur/4) // warm
		if err := plain.ConfigResetStat(ctx).Err(); err != nil {
			fmt.Printf("    server stats: %v\n", err)
			return
		}
		cpu0, err := serverCPU(ctx, plain)
		if err != nil {
			fmt.Printf("    server stats: %v\n", err)
			return
		}
		s := measure(ctx, c, goroutines, dur)
		cpu1, err := serverCPU(ctx, plain)
		if err != nil {
			fmt.Printf("    server stats: %v\n", err)
			return
		}
		info, err := plain.Info(ctx, "commandstats").Result()
		if err != nil {
			fmt.Printf("    server stats: %v\n", err)
			return
		}
		ops := float64(s.ops)
		var parts []string
		for _, st := range parseCommandStats(info) {
			if st.calls*4 < s.ops { // only commands run about once per op or more
				continue
			}
			parts = append(parts, fmt.Sprintf("%s %.2fµs×%.2f", st.name, st.usecPerCall, float64(st.calls)/ops))
		}
		fmt.Printf("    %-34s %9.0f op/s  server cpu/op %6.1fµs  client cpu/op %6.1fµs  %s\n", c.name,
			ops/s.elapsed.Seconds(), (cpu1-cpu0).Seconds()*1e6/ops, float64(s.cpu.Nanoseconds())/1000/ops, strings.Join(parts, ", "))
	}
}

// serverCPU is redis-server's used_cpu_sys + used_cpu_user.
func serverCPU(ctx context.Context, c *redis.Client) (time.Duration, error) {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("INFO cpu %s: %w", k, err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second)), nil
}

type commandStat struct {
	name        string
	calls       int64
	usec        int64 // total
	usecPerCall float64
}

// parseCommandStats reads "cmdstat_<name>:calls=N,usec=U,usec_per_call=P,..."
// lines, most called first.
func parseCommandStats(info string) []commandStat {
	var out []commandStat
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		st := commandStat{name: strings.TrimPrefix(name, "cmdstat_")}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				st.calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				st.usec, _ = strconv.ParseInt(v, 10, 64)
			case "usec_per_call":
				st.usecPerCall, _ = strconv.ParseFloat(v, 64)
			}
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].calls > out[j].calls })
	return out
}

// serverCost is what redis-server spent per op of one contender run alone.
type serverCost struct {
	opsPerSec float64
	// commandMicros is the INFO commandstats time of the named top-level
	// commands per op (a script's inner commands are inside its time and
	// are not added again).
	commandMicros float64
	// cpuMicros is redis-server's CPU (user+system, all threads) per op:
	// also what reading, parsing and replying cost, which pipelining cuts.
	cpuMicros float64
}

// measureServerCost runs c alone for dur with goroutines workers (after a
// warm-up of dur/4) and reads what the server spent on it: commands are
// the top-level commands c sends (for example evalsha and fcall, or incrby
// and pexpire). plain is an unguarded client on the private server.
func measureServerCost(ctx context.Context, plain *redis.Client, c contender, goroutines int, dur time.Duration, commands ...string) (serverCost, error) {
	measure(ctx, c, goroutines, dur/4)
	if err := plain.ConfigResetStat(ctx).Err(); err != nil {
		return serverCost{}, err
	}
	cpu0, err := serverCPU(ctx, plain)
	if err != nil {
		return serverCost{}, err
	}
	s := measure(ctx, c, goroutines, dur)
	cpu1, err := serverCPU(ctx, plain)
	if err != nil {
		return serverCost{}, err
	}
	info, err := plain.Info(ctx, "commandstats").Result()
	if err != nil {
		return serverCost{}, err
	}
	ops := float64(s.ops)
	var usec int64
	for _, st := range parseCommandStats(info) {
		if slices.Contains(commands, st.name) {
			usec += st.usec
		}
	}
	return serverCost{opsPerSec: ops / s.elapsed.Seconds(), commandMicros: float64(usec) / ops,
		cpuMicros: (cpu1 - cpu0).Seconds() * 1e6 / ops}, nil
}
