package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// cookieName is the dashboard's CSRF cookie. It has no Path, so the
// browser scopes it to the directory of the confirmation page: the mount
// point.
const cookieName = "outbox_dashboard"

// errBadToken is what a POST with a missing, wrong or expired token gets.
var errBadToken = errors.New("the confirmation is missing, expired or not from this dashboard")

// csrf makes and checks the tokens of the confirmation forms (see the
// package doc).
type csrf struct {
	key    []byte
	maxAge time.Duration
	now    func() time.Time
}

// session returns the request's session cookie value, setting a new one
// when it has none.
func (c *csrf) session(w http.ResponseWriter, r *http.Request) string {
	if ck, err := r.Cookie(cookieName); err == nil && len(ck.Value) >= 16 {
		return ck.Value
	}
	b := make([]byte, 18)
	_, _ = rand.Read(b) // never fails (crypto/rand panics instead)
	v := base64.RawURLEncoding.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{
		Name:     cookieName,
		Value:    v,
		HttpOnly: true,
		Secure:   r.TLS != nil,
		SameSite: http.SameSiteStrictMode,
	})
	return v
}

// token returns "<unix seconds>.<mac>" for action on row id.
func (c *csrf) token(session, action string, id int64) string {
	ts := strconv.FormatInt(c.now().Unix(), 10)
	return ts + "." + c.mac(session, action, id, ts)
}

func (c *csrf) mac(session, action string, id int64, ts string) string {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte(session + "\x00" + action + "\x00" + strconv.FormatInt(id, 10) + "\x00" + ts))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// check reports whether token authorises action on row id for the
// request's session cookie.
func (c *csrf) check(r *http.Request, token, action string, id int64) error {
	ck, err := r.Cookie(cookieName)
	if err != nil {
		return errBadToken
	}
	ts, mac, ok := strings.Cut(token, ".")
	if !ok {
		return errBadToken
	}
	issued, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return errBadToken
	}
	if age := c.now().Sub(time.Unix(issued, 0)); age < -time.Minute || age > c.maxAge {
		return errBadToken
	}
	if !hmac.Equal([]byte(mac), []byte(c.mac(ck.Value, action, id, ts))) {
		return errBadToken
	}
	return nil
}
