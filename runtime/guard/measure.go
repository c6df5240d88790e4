package guard

import (
	"encoding"
	"errors"
	"fmt"
	"math"
	"net"
	"reflect"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// sameCmd compares command identity. Every go-redis Cmder is a pointer; a
// non-comparable implementation is treated as "not the same", which only
// costs a re-check.
func sameCmd(a, b redis.Cmder) bool {
	ta := reflect.TypeOf(a)
	if ta != reflect.TypeOf(b) || !ta.Comparable() {
		return false
	}
	return a == b
}

// requestBytes sums the encoded size of every argument, stopping early once
// limit is exceeded. ok is false for an argument type go-redis would not
// encode as a plain bulk string (refused rather than guessed).
func requestBytes(args []any, limit int) (n int, ok bool) {
	for _, a := range args {
		if s, isStr := a.(string); isStr { // the common case, before the full type switch
			n += len(s)
			if n > limit {
				return n, true
			}
			continue
		}
		m, ok := argBytes(a)
		if !ok {
			return n, false
		}
		n += m
		if n > limit {
			return n, true
		}
	}
	return n, true
}

func argBytes(a any) (int, bool) {
	var buf [32]byte
	switch v := a.(type) {
	case nil:
		return 0, true
	case string:
		return len(v), true
	case []byte:
		return len(v), true
	case int:
		return len(strconv.AppendInt(buf[:0], int64(v), 10)), true
	case int8:
		return len(strconv.AppendInt(buf[:0], int64(v), 10)), true
	case int16:
		return len(strconv.AppendInt(buf[:0], int64(v), 10)), true
	case int32:
		return len(strconv.AppendInt(buf[:0], int64(v), 10)), true
	case int64:
		return len(strconv.AppendInt(buf[:0], v, 10)), true
	case uint:
		return len(strconv.AppendUint(buf[:0], uint64(v), 10)), true
	case uint8:
		return len(strconv.AppendUint(buf[:0], uint64(v), 10)), true
	case uint16:
		return len(strconv.AppendUint(buf[:0], uint64(v), 10)), true
	case uint32:
		return len(strconv.AppendUint(buf[:0], uint64(v), 10)), true
	case uint64:
		return len(strconv.AppendUint(buf[:0], v, 10)), true
	case float32:
		return len(strconv.AppendFloat(buf[:0], float64(v), 'f', -1, 32)), true
	case float64:
		return len(strconv.AppendFloat(buf[:0], v, 'f', -1, 64)), true
	case bool:
		return 1, true
	case time.Duration:
		return len(strconv.AppendInt(buf[:0], int64(v), 10)), true
	case time.Time:
		return len(time.RFC3339Nano), true
	case net.IP:
		return len(v.String()), true
	case encoding.BinaryMarshaler:
		b, err := v.MarshalBinary()
		if err != nil {
			return 0, false
		}
		return len(b), true
	}
	return 0, false
}

// maxDepth bounds the walk over nested replies (RESP3 maps of arrays ...).
const maxDepth = 16

// replyBytes measures a decoded reply: the bytes of every string and a
// fixed 8 per scalar, stopping early above limit. Typed go-redis commands
// are measured directly; anything else through its Val() by reflection so
// no command escapes the budget.
func replyBytes(cmd redis.Cmder, limit int) int {
	switch c := cmd.(type) {
	case *redis.StringCmd:
		return len(c.Val())
	case *redis.StatusCmd:
		return len(c.Val())
	case *redis.IntCmd, *redis.BoolCmd, *redis.FloatCmd, *redis.DurationCmd, *redis.TimeCmd:
		return 8
	case *redis.Cmd:
		return valueBytes(reflect.ValueOf(c.Val()), limit, 0)
	case *redis.SliceCmd:
		return valueBytes(reflect.ValueOf(c.Val()), limit, 0)
	case *redis.StringSliceCmd:
		n := 0
		for _, s := range c.Val() {
			n += len(s)
		}
		return n
	case *redis.IntSliceCmd:
		// The catalog's integer-tuple programs (rate-token-bucket-v2) read
		// their reply as []int64; 8 per integer, as IntCmd.
		return 8 * len(c.Val())
	}
	m := reflect.ValueOf(cmd).MethodByName("Val")
	if !m.IsValid() || m.Type().NumIn() != 0 || m.Type().NumOut() != 1 {
		return math.MaxInt // unmeasurable: fail closed
	}
	return valueBytes(m.Call(nil)[0], limit, 0)
}

func valueBytes(v reflect.Value, limit, depth int) int {
	if depth > maxDepth {
		return math.MaxInt
	}
	switch v.Kind() {
	case reflect.Invalid:
		return 0
	case reflect.Interface, reflect.Pointer:
		if v.IsNil() {
			return 0
		}
		return valueBytes(v.Elem(), limit, depth+1)
	case reflect.String:
		return v.Len()
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Uint8 {
			return v.Len()
		}
		n := 0
		for i := 0; i < v.Len() && n <= limit; i++ {
			n = addSat(n, valueBytes(v.Index(i), limit, depth+1))
		}
		return n
	case reflect.Map:
		n := 0
		it := v.MapRange()
		for it.Next() && n <= limit {
			n = addSat(n, valueBytes(it.Key(), limit, depth+1))
			n = addSat(n, valueBytes(it.Value(), limit, depth+1))
		}
		return n
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			return 8
		}
		n := 0
		for i := 0; i < v.NumField() && n <= limit; i++ {
			if v.Type().Field(i).IsExported() {
				n = addSat(n, valueBytes(v.Field(i), limit, depth+1))
			}
		}
		return n
	}
	return 8 // numbers, bools
}

func addSat(a, b int) int {
	if b > math.MaxInt-a {
		return math.MaxInt
	}
	return a + b
}

// clearReply withholds an over-budget value: every go-redis command type has
// SetVal, and setting its zero value drops the reference to the reply.
func clearReply(cmd redis.Cmder) {
	switch c := cmd.(type) {
	case *redis.StringCmd:
		c.SetVal("")
		return
	case *redis.Cmd:
		c.SetVal(nil)
		return
	case *redis.SliceCmd:
		c.SetVal(nil)
		return
	case *redis.StringSliceCmd:
		c.SetVal(nil)
		return
	case *redis.IntSliceCmd:
		c.SetVal(nil)
		return
	}
	m := reflect.ValueOf(cmd).MethodByName("SetVal")
	if m.IsValid() && m.Type().NumIn() == 1 {
		m.Call([]reflect.Value{reflect.Zero(m.Type().In(0))})
	}
}

// ErrUnsupportedClient is returned by Install for client types it cannot
// guard completely.
var ErrUnsupportedClient = errors.New("guard: unsupported client type")

// Install adds the guard to a client the runtime just created, before it
// sends anything. For a *redis.Client (standalone or NewFailoverClient) the
// hook covers every command, including the connection set-up that initConn
// runs through the client's hooks (HELLO, AUTH, SELECT, CLIENT SETNAME).
// For a *redis.ClusterClient the hook is added to the cluster client (so
// pipelines are admitted whole before routing) and to every node client it
// creates: go-redis does NOT copy cluster hooks to node clients, so without
// OnNewNode a node client from ForEachShard/MasterForKey, and node
// connection set-up (HELLO, READONLY, CLUSTER SLOTS), would bypass it.
// Install must run before the first command: OnNewNode does not reach node
// clients created earlier.
//
// Not covered by hooks (go-redis writes them directly): PubSub
// SUBSCRIBE/PSUBSCRIBE/UNSUBSCRIBE — gate them with Check. Also not
// covered: go-redis' internal sentinel clients (SENTINEL
// GET-MASTER-ADDR-BY-NAME, SUBSCRIBE +switch-master) expose no hook; they
// talk only to sentinels with the discovery credential.
func (g *Guard) Install(c redis.UniversalClient) error {
	switch cl := c.(type) {
	case *redis.Client:
		cl.AddHook(g)
	case *redis.ClusterClient:
		if !g.cluster {
			// Without Cluster the same-slot check and the node-level
			// admission marker are off: refuse rather than half-guard.
			return fmt.Errorf("%w: cluster client needs a guard with Cluster: true", ErrUnsupportedClient)
		}
		cl.AddHook(g)
		cl.OnNewNode(func(n *redis.Client) { n.AddHook(g) })
	default:
		return fmt.Errorf("%w: %T", ErrUnsupportedClient, c)
	}
	return nil
}
