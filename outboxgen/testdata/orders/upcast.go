package orders

import (
	"fmt"
	"strconv"
)

// upcastOrderPaidV1ToV2 is required by order_paid.gen.go because v2 is
// declared breaking: true. It is pure: no I/O, no clock. It maps the
// fields only: DecodeOrderPaid sets EventVersion, and OccurredAt from v1
// (TestDecodeStoredPayloads decodes a v1 payload through it).
func upcastOrderPaidV1ToV2(v1 OrderPaidV1) (OrderPaidV2, error) {
	if v1.AmountCents < 0 {
		return OrderPaidV2{}, fmt.Errorf("negative amount_cents %d", v1.AmountCents)
	}
	return OrderPaidV2{
		OrderID:       v1.OrderID,
		Amount:        Money{Value: centsToDecimal(v1.AmountCents), Currency: v1.Currency},
		PaymentMethod: v1.PaymentMethod,
		Lines:         map[string]Money{},
	}, nil
}

func centsToDecimal(c int64) string {
	return strconv.FormatInt(c/100, 10) + "." + fmt.Sprintf("%02d", c%100)
}
