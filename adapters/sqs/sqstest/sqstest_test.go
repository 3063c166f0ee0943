package sqstest_test

import (
	"strings"
	"testing"

	"github.com/gooutbox/outbox/adapters/sqs/sqstest"
)

func TestBrokerURL(t *testing.T) {
	u := sqstest.BrokerURL(t, "sqs")
	if !strings.HasPrefix(u, "sqs://") || !strings.HasSuffix(u, "?create=1") {
		t.Fatalf("BrokerURL = %q", u)
	}
}
