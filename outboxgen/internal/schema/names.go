package schema

import (
	"go/token"
	"strings"
	"unicode"
)

// commonInitialisms are written in upper case in Go names: golint's list,
// the additions of staticcheck's ST1003 (AMQP, DB, GID, RTP, SIP, TS), and
// initialisms common in event schemas (SKU, VIP, VAT, IBAN, ...).
var commonInitialisms = map[string]bool{
	"ACL": true, "API": true, "ASCII": true, "CPU": true, "CSS": true, "DNS": true,
	"EOF": true, "GUID": true, "HTML": true, "HTTP": true, "HTTPS": true, "ID": true,
	"IP": true, "JSON": true, "LHS": true, "QPS": true, "RAM": true, "RHS": true,
	"RPC": true, "SLA": true, "SMTP": true, "SQL": true, "SSH": true,
	"TCP": true, "TLS": true, "TTL": true, "UDP": true, "UI": true, "UID": true,
	"URI": true, "URL": true, "UTF8": true, "UUID": true, "VM": true, "XML": true,
	"XMPP": true, "XSRF": true, "XSS": true,
	// staticcheck ST1003
	"AMQP": true, "DB": true, "GID": true, "RTP": true, "SIP": true, "TS": true,
	// event schemas
	"BIC": true, "CSV": true, "EAN": true, "ETA": true, "IBAN": true, "ISBN": true,
	"KYC": true, "OTP": true, "PDF": true, "SKU": true, "SMS": true, "VAT": true,
	"VIP": true,
}

// GoName turns a snake_case (or any non-alphanumeric separated) name into
// an exported Go name with initialisms: order_id → OrderID.
func GoName(s string) string {
	var b strings.Builder
	for _, w := range splitWords(s) {
		if u := strings.ToUpper(w); commonInitialisms[u] {
			b.WriteString(u)
			continue
		}
		r := []rune(w)
		r[0] = unicode.ToUpper(r[0])
		b.WriteString(string(r))
	}
	out := b.String()
	if out == "" || !unicode.IsLetter([]rune(out)[0]) {
		out = "X" + out
	}
	return out
}

// LowerGoName is GoName with a lower-case first word, for parameters:
// order_id → orderID, id → id, url_path → urlPath.
func LowerGoName(s string) string {
	words := splitWords(s)
	if len(words) == 0 {
		return "x"
	}
	first := strings.ToLower(words[0])
	rest := GoName(strings.Join(words[1:], "_"))
	if len(words) == 1 {
		rest = ""
	}
	out := first + rest
	if !unicode.IsLetter([]rune(out)[0]) {
		out = "x" + out
	}
	if token.IsKeyword(out) || predeclared[out] {
		out += "Value"
	}
	return out
}

// predeclared identifiers and the package names generated code imports;
// parameters never shadow them.
var predeclared = map[string]bool{
	"any": true, "bool": true, "byte": true, "cap": true, "clear": true, "close": true,
	"complex": true, "copy": true, "delete": true, "error": true, "false": true,
	"float32": true, "float64": true, "imag": true, "int": true, "int32": true,
	"int64": true, "iota": true, "len": true, "make": true, "max": true, "min": true,
	"new": true, "nil": true, "panic": true, "print": true, "println": true,
	"real": true, "recover": true, "rune": true, "string": true, "true": true,
	"uint": true, "append": true, "comparable": true,
	"clk": true, "fmt": true, "json": true, "regexp": true, "runtime": true,
	"time": true, "uuid": true, "slices": true, "maps": true, "strconv": true,
	"e": true, "v": true,
}

func splitWords(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
}

// SnakeName turns a Go name into snake_case: OrderPaid → order_paid,
// HTTPRequest → http_request.
func SnakeName(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		if unicode.IsUpper(c) {
			if i > 0 && (unicode.IsLower(r[i-1]) || unicode.IsDigit(r[i-1]) ||
				i+1 < len(r) && unicode.IsLower(r[i+1]) && unicode.IsUpper(r[i-1])) {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(c))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// suggest returns the candidate closest to s by edit distance, or "" when
// none is close enough to be a plausible typo.
func suggest(s string, candidates []string) string {
	best, bestD := "", 0
	for _, c := range candidates {
		d := levenshtein(strings.ToLower(s), strings.ToLower(c))
		if best == "" || d < bestD {
			best, bestD = c, d
		}
	}
	limit := max(1, min(len(s), len(best))/3)
	if best == "" || bestD > limit {
		return ""
	}
	return best
}

// alias is a key users naturally type for one of ours, mostly from the
// JSON Schema and OpenAPI vocabulary, with a note when the meaning differs.
type alias struct {
	to, note string
}

// aliases maps a key, lower-cased and without "_", "-" and ".", to the key of
// ours it most likely means. Edit distance does not find these (minimum is
// three edits from min).
var aliases = map[string]alias{
	"minimum":          {to: "min"},
	"exclusiveminimum": {to: "min", note: "min is inclusive"},
	"maximum":          {to: "max"},
	"exclusivemaximum": {to: "max", note: "max is inclusive"},
	"maxlen":           {to: "max_length"},
	"maxlength":        {to: "max_length"},
	"maxsize":          {to: "max_length"},
	"regex":            {to: "pattern"},
	"regexp":           {to: "pattern"},
	"required":         {to: "optional", note: "fields are required unless optional: true"},
	"nullable":         {to: "optional"},
	"omitempty":        {to: "optional"},
	"defaultvalue":     {to: "default"},
	"enum":             {to: "values", note: "declare the enum under enums: and narrow it here with values:"},
	"allowed":          {to: "values"},
	"description":      {to: "doc"},
	"desc":             {to: "doc"},
	"comment":          {to: "doc"},
	"summary":          {to: "doc"},
	"title":            {to: "doc"},
	"properties":       {to: "fields"},
	"props":            {to: "fields"},
	"items":            {to: "type", note: "write type: list<T>"},
	"format":           {to: "type", note: "use the types uuid, timestamp, decimal"},
	"kind":             {to: "type"},
	"name":             {to: "type", note: "type is the wire name, e.g. orders.order_paid"},
	"eventtype":        {to: "type"},
	"aggregatetype":    {to: "aggregate"},
	"aggregateroot":    {to: "aggregate"},
	"mode":             {to: "compatibility"},
	"compat":           {to: "compatibility"},
	"version":          {to: "versions"},
	"removedfields":    {to: "removed"},
	"tombstones":       {to: "removed"},
	"reserved":         {to: "removed"},
	"deleted":          {to: "removed"},
	"obsolete":         {to: "deprecated"},
	"messages":         {to: "events"},
	"definitions":      {to: "types"},
	"defs":             {to: "types"},
	"$defs":            {to: "types"},
	"schemas":          {to: "types"},
	"objects":          {to: "types"},
	"pkg":              {to: "package"},
	"gopackage":        {to: "package"},
	// Field types.
	"integer":  {to: "int64"},
	"int":      {to: "int64"},
	"long":     {to: "int64"},
	"uint32":   {to: "int64"},
	"number":   {to: "decimal", note: "a decimal string; there are no floats"},
	"float":    {to: "decimal", note: "a decimal string; there are no floats"},
	"float64":  {to: "decimal", note: "a decimal string; there are no floats"},
	"double":   {to: "decimal", note: "a decimal string; there are no floats"},
	"boolean":  {to: "bool"},
	"text":     {to: "string"},
	"str":      {to: "string"},
	"datetime": {to: "timestamp"},
	"date":     {to: "timestamp"},
	"time":     {to: "timestamp"},
	"timetime": {to: "timestamp"},
	"instant":  {to: "timestamp"},
	"guid":     {to: "uuid"},
	"uuiduuid": {to: "uuid"},
}

// didYouMean formats a suggestion suffix: `; did you mean "x"?`, from the
// aliases when one names a candidate, else by edit distance.
func didYouMean(s string, candidates []string) string {
	norm := strings.NewReplacer("_", "", "-", "", ".", "").Replace(strings.ToLower(s))
	if a, ok := aliases[norm]; ok && a.to != s {
		for _, c := range candidates {
			if c == a.to {
				if a.note != "" {
					return "; did you mean " + quote(c) + "? (" + a.note + ")"
				}
				return "; did you mean " + quote(c) + "?"
			}
		}
	}
	if c := suggest(s, candidates); c != "" {
		return "; did you mean " + quote(c) + "?"
	}
	return ""
}

func quote(s string) string { return `"` + s + `"` }

func levenshtein(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
