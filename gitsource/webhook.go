package gitsource

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
)

// maxWebhookBody bounds what an unauthenticated caller can make us read.
const maxWebhookBody = 1 << 20

// VerifySignature checks Gitea's X-Gitea-Signature: the hex HMAC-SHA256 of the body under the secret.
func VerifySignature(secret, body []byte, signature string) bool {
	want, err := hex.DecodeString(signature)
	if err != nil || len(secret) == 0 {
		return false
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return hmac.Equal(mac.Sum(nil), want)
}

// WebhookHandler answers Gitea push webhooks: a good signature triggers an immediate poll (202); a bad
// or missing one is 401 and triggers nothing.
func WebhookHandler(secret func() []byte, trigger func()) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxWebhookBody))
		if err != nil {
			http.Error(w, "read body", http.StatusBadRequest)
			return
		}
		if !VerifySignature(secret(), body, r.Header.Get("X-Gitea-Signature")) {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		trigger()
		w.WriteHeader(http.StatusAccepted)
	})
}
