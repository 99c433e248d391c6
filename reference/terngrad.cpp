// TEMPORARY bootstrap file: replaced by the real reference codec before commit.
#include "common.hpp"
namespace gradcodec::reference {
std::size_t terngrad_workspace(const codec_spec&, const_tensor_view, operation) { return 0; }
status terngrad_encode(const detail::encode_call&) { return {status_code::backend_unavailable, "terngrad: BOOTSTRAP"}; }
status terngrad_decode(const detail::decode_call&) { return {status_code::backend_unavailable, "terngrad: BOOTSTRAP"}; }
}  // namespace gradcodec::reference
