#include "harness/topology/xml_document.h"

#include <libxml/SAX2.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <libxml/xmlerror.h>

#include <climits>
#include <cstdio>
#include <memory>

#include "reference/core/text.h"

namespace peerlab::topology {
namespace {

// The first error libxml2 reports while parsing (later ones follow from it).
struct FirstError {
  bool set = false;
  int code = 0;
  int line = 0;
  int column = 0;
  std::string message;
};

void onError(void* ctx, xmlErrorPtr error) {
  auto* first = static_cast<FirstError*>(ctx);
  if (first->set || !error || error->level == XML_ERR_WARNING) return;
  first->set = true;
  first->code = error->code;
  first->line = error->line;
  first->column = error->int2;
  first->message = error->message ? error->message : "unknown error";
  while (!first->message.empty() && (first->message.back() == '\n' || first->message.back() == ' '))
    first->message.pop_back();
}

// An entity declaration in the document's DTD: the document is refused at once. Topology files declare none, and an
// entity referenced many times multiplies the document (every attribute value that names it is expanded).
struct EntityRefusal {
  bool declared = false;
  int line = 0;
  std::string name;
};

// The parse in progress on this thread (xmlCtxtReadMemory resets the context's own fields).
thread_local EntityRefusal* tRefusal = nullptr;

void onEntityDecl(void* ctx, const xmlChar* name, int, const xmlChar*, const xmlChar*, xmlChar*) {
  auto* ctxt = static_cast<xmlParserCtxtPtr>(ctx);
  EntityRefusal* refusal = tRefusal;
  if (refusal != nullptr && !refusal->declared) {
    refusal->declared = true;
    refusal->line = xmlSAX2GetLineNumber(ctx);
    refusal->name = name ? reinterpret_cast<const char*>(name) : "";
  }
  xmlStopParser(ctxt);
}

struct DocDeleter {
  void operator()(xmlDoc* doc) const noexcept { xmlFreeDoc(doc); }
};
struct XmlFreeDeleter {
  void operator()(xmlChar* s) const noexcept { xmlFree(s); }
};
struct CtxtDeleter {
  void operator()(xmlParserCtxt* ctxt) const noexcept { xmlFreeParserCtxt(ctxt); }
};

std::string text(const xmlChar* s) {
  return s ? reinterpret_cast<const char*>(s) : "";
}

// Copies an element and its element descendants; iterative, so a deep document cannot exhaust the stack.
XmlElement copyTree(xmlNode* root) {
  XmlElement out;
  std::vector<std::pair<xmlNode*, XmlElement*>> todo{{root, &out}};
  while (!todo.empty()) {
    auto [node, el] = todo.back();
    todo.pop_back();
    el->name = text(node->name);
    el->line = static_cast<int>(std::min<long>(xmlGetLineNo(node), INT_MAX));
    for (xmlAttr* a = node->properties; a; a = a->next) {
      std::unique_ptr<xmlChar, XmlFreeDeleter> value(xmlNodeListGetString(node->doc, a->children, 1));
      el->attributes.emplace_back(text(a->name), text(value.get()));
    }
    size_t count = 0;
    for (xmlNode* c = node->children; c; c = c->next)
      count += c->type == XML_ELEMENT_NODE;
    el->children.resize(count);
    size_t k = 0;
    for (xmlNode* c = node->children; c; c = c->next) {
      if (c->type == XML_ELEMENT_NODE) todo.emplace_back(c, &el->children[k++]);
    }
  }
  return out;
}

// Whether an error at (line, column) sits at the end of `s`: the file stops inside a construct.
bool atEnd(std::string_view s, int line, int column) {
  int lines = 1;
  size_t last_start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n') {
      ++lines;
      last_start = i + 1;
    }
  }
  return line >= lines && column >= static_cast<int>(s.size() - last_start);
}

}  // namespace

const std::string* XmlElement::attribute(std::string_view key) const {
  for (const auto& [k, v] : attributes) {
    if (k == key) return &v;
  }
  return nullptr;
}

StatusOr<XmlElement> parseXml(std::string_view s) {
  if (s.size() >= static_cast<size_t>(INT_MAX)) return PEERLAB_INVALID_ARGUMENT("file too large");
  xmlInitParser();
  std::unique_ptr<xmlParserCtxt, CtxtDeleter> ctxt(xmlNewParserCtxt());
  if (!ctxt) return PEERLAB_INTERNAL("libxml2: cannot create a parser");
  EntityRefusal refusal;
  tRefusal = &refusal;
  ctxt->sax->entityDecl = onEntityDecl;
  FirstError first;
  // NOTE: the structured handler is per thread in libxml2; it also keeps libxml2 from printing to stderr.
  xmlSetStructuredErrorFunc(&first, onError);
  std::unique_ptr<xmlDoc, DocDeleter> doc(
      xmlCtxtReadMemory(ctxt.get(), s.data(), static_cast<int>(s.size()), nullptr, nullptr,
                        XML_PARSE_NONET | XML_PARSE_NOWARNING | XML_PARSE_BIG_LINES));
  xmlSetStructuredErrorFunc(nullptr, nullptr);
  tRefusal = nullptr;
  if (refusal.declared) {
    return PEERLAB_INVALID_ARGUMENT("line " + std::to_string(std::max(refusal.line, 1)) +
                                    ": the document declares "
                                    "the entity \"" +
                                    printable(refusal.name, kQuoteLimit) +
                                    "\"; topology XML with entity declarations is not read");
  }
  if (!doc || !ctxt->wellFormed || first.set) {
    std::string why = first.set ? printable(first.message, 2 * kQuoteLimit) : "not well-formed XML";
    // The file stops inside a construct (a mismatched end tag or an empty file is reported at the end too).
    if (first.set && first.code != XML_ERR_TAG_NAME_MISMATCH && first.code != XML_ERR_DOCUMENT_EMPTY &&
        atEnd(s, first.line, first.column)) {
      why += " (truncated file?)";
    }
    return PEERLAB_INVALID_ARGUMENT("line " + std::to_string(std::max(first.line, 1)) + ": " + why);
  }
  xmlNode* root = xmlDocGetRootElement(doc.get());
  if (!root) return PEERLAB_INVALID_ARGUMENT("line 1: no root element (empty or not an XML file)");
  return copyTree(root);
}

std::string printable(std::string_view text, size_t max_bytes) {
  return peerlab::printable(text, max_bytes);
}

}  // namespace peerlab::topology
