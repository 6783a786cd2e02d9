//! A tool's argument schema, derived from the type its arguments are read
//! into, so that what the model is told and what the tool accepts cannot
//! drift apart: the field docs are the descriptions, `#[serde(default)]`
//! makes a field optional, `#[schemars(range(min = 1))]` a bound.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value};

/// The JSON Schema of `T`, in the plain form every provider takes.
pub fn schema<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft07()
        .with(|settings| {
            settings.inline_subschemas = true;
            settings.meta_schema = None;
        })
        .into_generator();
    let mut value = serde_json::to_value(generator.into_root_schema_for::<T>()).unwrap_or_default();
    if let Value::Object(root) = &mut value {
        root.remove("description");
        tidy(root);
    }
    value
}

/// What models need of a schema: types, descriptions, bounds and what is
/// required. Titles, formats and null defaults go, and an optional field
/// is of its own type only: leaving it out is how it is absent.
fn tidy(schema: &mut Map<String, Value>) {
    schema.remove("title");
    schema.remove("format");
    if schema.get("default") == Some(&Value::Null) {
        schema.remove("default");
    }
    if let Some(Value::Array(types)) = schema.get_mut("type") {
        types.retain(|t| t != "null");
        if types.len() == 1 {
            let only = types.remove(0);
            schema.insert("type".to_string(), only);
        }
    }
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        for property in properties.values_mut() {
            if let Value::Object(property) = property {
                tidy(property);
            }
        }
    }
    if let Some(Value::Object(items)) = schema.get_mut("items") {
        tidy(items);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Args {
        /// Where
        path: String,
        /// How many
        #[serde(default)]
        #[schemars(range(min = 1))]
        limit: Option<usize>,
    }

    #[test]
    fn optional_fields_are_plain_and_bounds_stay() {
        let schema = super::schema::<Args>();
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["required"], json!(["path"]));
        assert_eq!(
            schema["properties"]["limit"],
            json!({"type": "integer", "minimum": 1, "description": "How many"})
        );
        assert_eq!(
            schema["properties"]["path"],
            json!({"type": "string", "description": "Where"})
        );
        assert!(schema.get("title").is_none());
    }
}
