// TEMPORARY bootstrap file: replaced by the real reference codec before commit.
#include "common.hpp"
namespace gradcodec::reference {
std::size_t powersgd_workspace(const codec_spec&, const_tensor_view, operation) { return 0; }
status powersgd_encode(const detail::encode_call&) { return {status_code::backend_unavailable, "powersgd: BOOTSTRAP"}; }
status powersgd_decode(const detail::decode_call&) { return {status_code::backend_unavailable, "powersgd: BOOTSTRAP"}; }
}  // namespace gradcodec::reference
