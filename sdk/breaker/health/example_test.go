package health_test

import (
	"log"
	"net/http"

	"github.com/cbdash/cbdash/sdk/breaker"
	"github.com/cbdash/cbdash/sdk/breaker/health"
)

// A service reports its breakers on its readiness endpoint: the
// recommendations dependency can only make it degraded (200); its own
// database, without which it cannot answer, can take it out of rotation
// (503).
func Example() {
	recs, err := breaker.New("recommendations", breaker.Config{})
	if err != nil {
		log.Fatal(err)
	}
	db, err := breaker.New("orders-db", breaker.Config{})
	if err != nil {
		log.Fatal(err)
	}
	ready := health.New()
	if err := ready.Add(recs, health.NonCritical); err != nil {
		log.Fatal(err)
	}
	if err := ready.Add(db, health.Critical); err != nil {
		log.Fatal(err)
	}
	http.Handle("/readyz", ready)
}
