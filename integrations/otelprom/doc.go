// Package otelprom exports a quietpatch pipeline's instruments to
// Prometheus in a few lines, for controllers on plain client-go: an
// OpenTelemetry SDK MeterProvider whose instruments a Prometheus registry
// gathers on every scrape, named as the table of package quietpatch says.
//
//	func serveMetrics(ctx context.Context, cfg *quietpatch.Config) (http.Handler, error) {
//		reg := prometheus.NewRegistry()
//		provider, err := otelprom.NewMeterProvider(reg)
//		if err != nil {
//			return nil, err
//		}
//		context.AfterFunc(ctx, func() { _ = provider.Shutdown(context.Background()) })
//		cfg.Meter = provider.Meter(otelprom.MeterName)
//		return promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil
//	}
//
// It is a module of its own, so that the library's go.mod does not gain
// the OpenTelemetry SDK and the Prometheus client.
package otelprom
