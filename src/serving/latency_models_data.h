// The text of data/latency_models.csv, compiled into the binary. The
// definition is generated at build time (src/serving/CMakeLists.txt turns the
// CSV into latency_models_data.cc); read it through BuiltinLatencyModels().
#ifndef GPUSCHED_SERVING_LATENCY_MODELS_DATA_H_
#define GPUSCHED_SERVING_LATENCY_MODELS_DATA_H_

namespace gpusched::serving::internal {

extern const char kBuiltinLatencyModelsCsv[];

}  // namespace gpusched::serving::internal

#endif  // GPUSCHED_SERVING_LATENCY_MODELS_DATA_H_
