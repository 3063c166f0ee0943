package alltypes

import (
	"errors"
	"os"
	"testing"

	"github.com/gooutbox/outbox/runtime"
)

// TestValidateProblems checks that a failing nested value is reported at its
// full JSON path, and with the problem of the check that failed.
func TestValidateProblems(t *testing.T) {
	payload, err := os.ReadFile("payloads/v1.json")
	if err != nil {
		t.Fatal(err)
	}
	zip := "1234"
	tests := []struct {
		change      func(*CustomerRegistered)
		wantField   string
		wantProblem string
	}{
		{func(e *CustomerRegistered) { e.Address.Street = string(make([]byte, 101)) }, "address.street", "must be at most 100 characters long"},
		{func(e *CustomerRegistered) { e.Lines = append(e.Lines, Line{SKU: "a", Quantity: 1, Price: "1"}) }, "lines[1].sku", "must match ^[A-Z0-9-]+$"},
		{func(e *CustomerRegistered) { e.Lines[0].Price = "1." }, "lines[0].price", `must be a decimal string such as "12.34"`},
		{func(e *CustomerRegistered) { e.Nested[1][0] = "fax" }, "nested[1][0]", `unknown value "fax" (want one of web, mobile_app, point-of-sale)`},
		{func(e *CustomerRegistered) { e.SecondAddress = &Address{Street: "s", City: "c", Zip: &zip} }, "second_address.zip", "must match ^[0-9]{5}$"},
		{func(e *CustomerRegistered) { s := Status("gone"); e.CustomerStatus = &s }, "customer_status", `unknown value "gone" (want one of open, closed)`},
	}
	for _, tt := range tests {
		e, err := DecodeCustomerRegistered(1, payload)
		if err != nil {
			t.Fatal(err)
		}
		tt.change(&e)
		err = e.Validate()
		var fe *runtime.FieldError
		if !errors.As(err, &fe) || fe.Field != tt.wantField || fe.Problem != tt.wantProblem {
			t.Errorf("Validate() = %v, want field %s: %s", err, tt.wantField, tt.wantProblem)
		}
	}
}
