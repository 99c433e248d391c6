// TEMPORARY bootstrap file: replaced by the real reference codec before commit.
#include "common.hpp"
namespace gradcodec::reference {
std::size_t dgc_workspace(const codec_spec&, const_tensor_view, operation) { return 0; }
status dgc_encode(const detail::encode_call&) { return {status_code::backend_unavailable, "dgc: BOOTSTRAP"}; }
status dgc_decode(const detail::decode_call&) { return {status_code::backend_unavailable, "dgc: BOOTSTRAP"}; }
}  // namespace gradcodec::reference
