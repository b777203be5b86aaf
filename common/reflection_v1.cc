#include "common/reflection_v1.h"

#include <algorithm>
#include <memory>
#include <mutex>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpcpp/impl/server_builder_plugin.h"
#include "grpcpp/impl/server_initializer.h"
#include "grpcpp/server_builder.h"

namespace folio {
namespace {

namespace pb = google::protobuf;
namespace refl = grpc::reflection::v1;

// Adds `file` and, first, every file it imports that this stream has not sent yet.
void AddFile(const pb::FileDescriptor* file, std::vector<std::string>* sent,
             refl::FileDescriptorResponse* out) {
  if (std::find(sent->begin(), sent->end(), file->name()) != sent->end()) return;
  sent->push_back(file->name());
  pb::FileDescriptorProto proto;
  file->CopyTo(&proto);
  proto.SerializeToString(out->add_file_descriptor_proto());
  for (int i = 0; i < file->dependency_count(); ++i) AddFile(file->dependency(i), sent, out);
}

void Error(grpc::StatusCode code, const std::string& message, refl::ServerReflectionResponse* r) {
  r->mutable_error_response()->set_error_code(code);
  r->mutable_error_response()->set_error_message(message);
}

class ReflectionV1Plugin final : public grpc::ServerBuilderPlugin {
 public:
  std::string name() override { return "folio_reflection_v1"; }
  void InitServer(grpc::ServerInitializer* si) override { si->RegisterService(service_); }
  void Finish(grpc::ServerInitializer* si) override {
    service_->SetServiceList(si->GetServiceList());
  }
  void ChangeArguments(const std::string&, void*) override {}
  bool has_sync_methods() const override { return true; }
  bool has_async_methods() const override { return false; }

 private:
  std::shared_ptr<ReflectionV1Service> service_ = std::make_shared<ReflectionV1Service>();
};

std::unique_ptr<grpc::ServerBuilderPlugin> MakePlugin() {
  return std::make_unique<ReflectionV1Plugin>();
}

}  // namespace

void EnableReflectionV1() {
  static std::once_flag once;
  std::call_once(once, [] { grpc::ServerBuilder::InternalAddPluginFactory(&MakePlugin); });
}

refl::ServerReflectionResponse ReflectionV1Service::Answer(const refl::ServerReflectionRequest& req,
                                                           std::vector<std::string>* sent) const {
  const pb::DescriptorPool* pool = pb::DescriptorPool::generated_pool();
  refl::ServerReflectionResponse r;
  r.set_valid_host(req.host());
  *r.mutable_original_request() = req;
  switch (req.message_request_case()) {
    case refl::ServerReflectionRequest::kListServices:
      if (services_ != nullptr) {
        for (const std::string& name : *services_) {
          r.mutable_list_services_response()->add_service()->set_name(name);
        }
      }
      break;
    case refl::ServerReflectionRequest::kFileByFilename: {
      const pb::FileDescriptor* file = pool->FindFileByName(req.file_by_filename());
      if (file == nullptr) {
        Error(grpc::NOT_FOUND, "file not found: " + req.file_by_filename(), &r);
      } else {
        AddFile(file, sent, r.mutable_file_descriptor_response());
      }
      break;
    }
    case refl::ServerReflectionRequest::kFileContainingSymbol: {
      const pb::FileDescriptor* file = pool->FindFileContainingSymbol(req.file_containing_symbol());
      if (file == nullptr) {
        Error(grpc::NOT_FOUND, "symbol not found: " + req.file_containing_symbol(), &r);
      } else {
        AddFile(file, sent, r.mutable_file_descriptor_response());
      }
      break;
    }
    case refl::ServerReflectionRequest::kFileContainingExtension: {
      const refl::ExtensionRequest& ext = req.file_containing_extension();
      const pb::Descriptor* type = pool->FindMessageTypeByName(ext.containing_type());
      const pb::FieldDescriptor* field =
          type == nullptr ? nullptr : pool->FindExtensionByNumber(type, ext.extension_number());
      if (field == nullptr) {
        Error(grpc::NOT_FOUND, "extension not found: " + ext.containing_type(), &r);
      } else {
        AddFile(field->file(), sent, r.mutable_file_descriptor_response());
      }
      break;
    }
    case refl::ServerReflectionRequest::kAllExtensionNumbersOfType: {
      const pb::Descriptor* type = pool->FindMessageTypeByName(req.all_extension_numbers_of_type());
      if (type == nullptr) {
        Error(grpc::NOT_FOUND, "type not found: " + req.all_extension_numbers_of_type(), &r);
        break;
      }
      std::vector<const pb::FieldDescriptor*> extensions;
      pool->FindAllExtensions(type, &extensions);
      refl::ExtensionNumberResponse* out = r.mutable_all_extension_numbers_response();
      out->set_base_type_name(type->full_name());
      for (const pb::FieldDescriptor* f : extensions) out->add_extension_number(f->number());
      break;
    }
    default:
      Error(grpc::UNIMPLEMENTED, "the request names no known reflection query", &r);
  }
  return r;
}

grpc::Status ReflectionV1Service::ServerReflectionInfo(
    grpc::ServerContext*,
    grpc::ServerReaderWriter<refl::ServerReflectionResponse, refl::ServerReflectionRequest>* stream) {
  std::vector<std::string> sent;
  refl::ServerReflectionRequest req;
  while (stream->Read(&req)) {
    if (!stream->Write(Answer(req, &sent))) break;
  }
  return grpc::Status::OK;
}

}  // namespace folio
