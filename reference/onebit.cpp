// TEMPORARY bootstrap file: replaced by the real reference codec before commit.
#include "common.hpp"
namespace gradcodec::reference {
std::size_t onebit_workspace(const codec_spec&, const_tensor_view, operation) { return 0; }
status onebit_encode(const detail::encode_call&) { return {status_code::backend_unavailable, "onebit: BOOTSTRAP"}; }
status onebit_decode(const detail::decode_call&) { return {status_code::backend_unavailable, "onebit: BOOTSTRAP"}; }
}  // namespace gradcodec::reference
