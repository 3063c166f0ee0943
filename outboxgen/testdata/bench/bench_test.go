// Package bench_test measures the code outboxgen generates, over the golden
// packages alltypes and orders: Validate of a valid event (which must not
// allocate) and decoding of stored payloads of every version.
package bench_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/gooutbox/outbox/outboxgen/testdata/alltypes"
	"github.com/gooutbox/outbox/outboxgen/testdata/orders"
	"github.com/gooutbox/outbox/runtime"
)

// alltypesV2 is a valid latest-version CustomerRegistered payload with
// several list and map entries, so that per-element validation shows.
const alltypesV2 = `{"event_version":2,"occurred_at":"2026-01-02T03:04:05.123456Z",` +
	`"customer_id":"0b0e8f0a-5f2c-4a61-9d1e-7c1b2a3d4e5f","email":"a@example.com","age":42,` +
	`"vip":true,"balance":"-1.50","registered_at":"2025-12-31T23:59:59Z","channel":"mobile_app",` +
	`"address":{"street":"Main St 1","city":"Springfield","zip":"12345","geo":{"lat":1,"lng":2}},` +
	`"lines":[{"sku":"A-1","quantity":2,"price":"9.99"},{"sku":"B-2","quantity":1,"price":"1.00"},{"sku":"C-3","quantity":5,"price":"0.50","tags":["x","y"]}],` +
	`"attributes":{"k":"v"},"scores":{"s":[1,2],"t":[3]},"nested":[["web"],["mobile_app","web"]],` +
	`"lucky_number":13,"status":"open","second_address":{"street":"Side St 2","city":"Shelbyville"},` +
	`"locale":"de-DE","premium":true,"since":"2021-01-01T00:00:00Z","partner":"00000000-0000-0000-0000-000000000002",` +
	`"fee":"1.25","preferred_channel":"web","labels":["a"],"counters":{"c":1},"customer_status":"closed"}`

// ordersV3 is a valid latest-version OrderPaid payload with map entries.
const ordersV3 = `{"event_version":3,"occurred_at":"2026-01-02T03:04:05.123456Z",` +
	`"order_id":"0b0e8f0a-5f2c-4a61-9d1e-7c1b2a3d4e5f","amount":{"value":"19.99","currency":"EUR"},` +
	`"payment_method":"card","provider_ref":"psp-1","tags":["gift"],` +
	`"lines":{"sku-1":{"value":"9.99","currency":"EUR"},"sku-2":{"value":"10.00","currency":"EUR"}},"refund_window_days":30}`

func readFile(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// validEvents returns valid events of every shape the golden packages have,
// by name.
func validEvents(tb testing.TB) []struct {
	name string
	ev   runtime.Event
} {
	tb.Helper()
	var v1 alltypes.CustomerRegisteredV1
	if err := json.Unmarshal(readFile(tb, "../alltypes/payloads/v1.json"), &v1); err != nil {
		tb.Fatal(err)
	}
	v2, err := alltypes.DecodeCustomerRegistered(2, []byte(alltypesV2))
	if err != nil {
		tb.Fatal(err)
	}
	o3, err := orders.DecodeOrderPaid(3, []byte(ordersV3))
	if err != nil {
		tb.Fatal(err)
	}
	return []struct {
		name string
		ev   runtime.Event
	}{
		{"alltypes_v1", v1},
		{"alltypes_v2", v2},
		{"orders_v3", o3},
	}
}

// TestValidateDoesNotAllocate guards the zero-allocation promise of
// generated Validate methods for valid events: error values and paths are
// built only on the failing branch.
func TestValidateDoesNotAllocate(t *testing.T) {
	for _, c := range validEvents(t) {
		if err := c.ev.Validate(); err != nil {
			t.Fatalf("%s: Validate() = %v, want nil", c.name, err)
		}
		if n := testing.AllocsPerRun(100, func() { _ = c.ev.Validate() }); n != 0 {
			t.Errorf("%s: Validate of a valid event allocates %v times per call, want 0", c.name, n)
		}
	}
}

func BenchmarkValidate(b *testing.B) {
	for _, c := range validEvents(b) {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.ev.Validate(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	cases := []struct {
		name    string
		version int
		payload []byte
		decode  func(int, []byte) error
	}{
		{"alltypes_v1", 1, readFile(b, "../alltypes/payloads/v1.json"), decodeAlltypes},
		{"alltypes_v2", 2, []byte(alltypesV2), decodeAlltypes},
		{"orders_v1", 1, readFile(b, "../orders/payloads/v1.json"), decodeOrders},
		{"orders_v2", 2, readFile(b, "../orders/payloads/v2.json"), decodeOrders},
		{"orders_v3", 3, []byte(ordersV3), decodeOrders},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.decode(c.version, c.payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func decodeAlltypes(v int, p []byte) error {
	_, err := alltypes.DecodeCustomerRegistered(v, p)
	return err
}

func decodeOrders(v int, p []byte) error {
	_, err := orders.DecodeOrderPaid(v, p)
	return err
}
