package pgcdc

import (
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/gooutbox/outbox/runtime/sqlstore"
)

// pgTime is how timestamptz reads in text form on the replication
// connection, whose session runs with DateStyle ISO and TimeZone UTC.
const pgTime = "2006-01-02 15:04:05.999999999-07"

// decodeInsert returns the outbox row of an insert into rel.
func decodeInsert(rel *pglogrepl.RelationMessage, tuple *pglogrepl.TupleData) (sqlstore.RowValues, error) {
	var r sqlstore.RowValues
	if tuple == nil || len(tuple.Columns) != len(rel.Columns) {
		return r, fmt.Errorf("pgcdc: insert into %s.%s: %d values for %d columns", rel.Namespace, rel.RelationName, columnCount(tuple), len(rel.Columns))
	}
	for i, col := range tuple.Columns {
		name := rel.Columns[i].Name
		if col.DataType == pglogrepl.TupleDataTypeNull {
			continue
		}
		if col.DataType != pglogrepl.TupleDataTypeText {
			return r, fmt.Errorf("pgcdc: insert into %s.%s: column %s: value of kind %q, want text", rel.Namespace, rel.RelationName, name, col.DataType)
		}
		v := string(col.Data)
		var err error
		switch name {
		case "id":
			r.ID, err = strconv.ParseInt(v, 10, 64)
		case "event_id":
			r.EventID = v
		case "event_type":
			r.EventType = v
		case "event_version":
			r.EventVersion, err = strconv.Atoi(v)
		case "aggregate_type":
			r.AggregateType = v
		case "aggregate_id":
			r.AggregateID = v
		case "topic":
			r.Topic = v
		case "payload":
			r.Payload = []byte(v)
		case "headers":
			r.Headers = v
		case "occurred_at":
			r.OccurredAt, err = time.Parse(pgTime, v)
		case "created_at":
			r.CreatedAt, err = time.Parse(pgTime, v)
		case "attempts":
			r.Attempts, err = strconv.Atoi(v)
		}
		if err != nil {
			return r, fmt.Errorf("pgcdc: insert into %s.%s: column %s: %w", rel.Namespace, rel.RelationName, name, err)
		}
	}
	if r.ID == 0 || r.EventID == "" {
		return r, fmt.Errorf("pgcdc: insert into %s.%s: no id or event_id column: is it an outbox table?", rel.Namespace, rel.RelationName)
	}
	return r, nil
}

func columnCount(t *pglogrepl.TupleData) int {
	if t == nil {
		return 0
	}
	return len(t.Columns)
}
